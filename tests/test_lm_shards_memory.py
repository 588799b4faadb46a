"""Training streams a sharded corpus bigger than the memory its process may allocate."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tokformer.tasks import lm_data, lm_shards
from tokformer.tokenizers.bpe import BPETokenizer

CORPUS_MB = 384  # 192M uint16 ids of synthetic text (48 documents): a 256 MB shard and a 128 MB one
HEADROOM_MB = 256  # what training may allocate beyond the imports: less than the corpus, or one whole shard

# RLIMIT_DATA caps private writable memory (heap, anonymous maps: where a corpus loaded into RAM
# would live); read-only file maps (the shards) are outside it. It is set after the imports, whose
# virtual reservations are large, so HEADROOM_MB is what training itself may add.
SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    import numpy as np
    from tokformer.engine import train

    def data_mb():
        line = next(line for line in open("/proc/self/status") if line.startswith("VmData:"))
        return int(line.split()[1]) >> 10

    shards, run, headroom = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    before = data_mb()
    limit = (before + headroom) << 20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    result = train("lm", data=str(shards), context_len=32, d_model=16, n_heads=2, n_layers=1, val_fraction=1e-4,
                   batch_size=8, steps=4, eval_every=4, device="cpu", quiet=True, run_dir=run)
    after = data_mb()
    try:  # the control: the corpus itself does not fit under the limit
        whole = np.concatenate([np.fromfile(f, dtype=np.uint16) for f in sorted(shards.glob("shard-*.bin"))])
        loaded = True
    except MemoryError:
        loaded = False
    print(json.dumps({"step": result.step, "perplexity": result.metrics["perplexity"], "loaded": loaded,
                      "data_mb_before": before, "data_mb_after": after, "limit_mb": limit >> 20,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}))
""")


@pytest.mark.slow  # ~10-20 s: 384 MB written, a fresh interpreter imports torch, the baseline reads every id
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_DATA and /proc/self/status are Linux's")
def test_training_on_a_corpus_bigger_than_the_memory_limit(tmp_path):
    shards = tmp_path / "shards"
    try:
        bpe = BPETokenizer.train(["hello world"], 300, special_tokens=[lm_data.EOT])
        rng = np.random.default_rng(0)
        documents = (rng.integers(0, bpe.vocab_size, size=1 << 22, dtype=np.uint16) for _ in range(CORPUS_MB // 8))
        index = lm_shards.write_shards(documents, shards, bpe, shard_tokens=1 << 27)
        assert index.tokens * 2 >= CORPUS_MB << 20 and len(index.shards) == 2
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(shards), str(tmp_path / "run"), str(HEADROOM_MB)],
                              capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["step"] == 4 and report["perplexity"] > 1
        assert not report["loaded"], "the limit must be smaller than the corpus, or the test proves nothing"
        assert report["data_mb_after"] - report["data_mb_before"] < HEADROOM_MB < CORPUS_MB
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # 384 MB: not left for pytest's kept temp directories
