"""Birds: CNNs vs a Transformer on counting birds vs comparing two far-apart birds.

``run_experiment(out_dir, quick=True)`` generates the images, trains every model on both
tasks for every seed and writes a Markdown + PNG report; ``tokformer birds`` calls it. Each run is
task ``birds`` (``tokformer train birds``) trained by the engine.
See docs/birds.md.
"""

from tokformer.tasks.birds.experiment import BirdsConfig, full_config, quick_config, run_experiment
from tokformer.tasks.birds.task import BirdsTask, BirdsTaskConfig

__all__ = ["BirdsConfig", "BirdsTask", "BirdsTaskConfig", "full_config", "quick_config", "run_experiment"]
