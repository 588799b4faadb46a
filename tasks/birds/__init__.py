"""Birds: CNNs vs a Transformer on counting birds vs comparing two far-apart birds.

``run_experiment(out_dir, quick=True)`` generates the images, trains every model on both
tasks for every seed and writes a Markdown + PNG report; ``tokformer birds`` calls it.
See docs/birds.md.
"""

from tokformer.tasks.birds.experiment import BirdsConfig, full_config, quick_config, run_experiment

__all__ = ["BirdsConfig", "full_config", "quick_config", "run_experiment"]
