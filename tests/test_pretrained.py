"""Model folders (save_pretrained / from_pretrained / load_model) and fine-tuning with init_from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tiny import TINY, TRAIN, randomised

import tokformer
from tokformer.engine import load_run, train
from tokformer.errors import CheckpointError, ConfigError, DataError
from tokformer.interop.timm import to_timm_state_dict
from tokformer.store.checkpoints import tokenizer_fingerprint

pytestmark = pytest.mark.usefixtures("one_thread")

PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol 2+, and torch.save's zip container


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny trained run per task, made on first use."""
    root = tmp_path_factory.mktemp("runs")

    class Runs(dict):
        def __missing__(self, name: str) -> Path:
            self[name] = train(name, run_dir=str(root / name), **TINY[name], **TRAIN).run_dir
            return self[name]

    return Runs()


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    x, y = a.state_dict(), b.state_dict()
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("name", list(TINY))
def test_round_trip_is_bit_exact_and_pickle_free(name: str, runs: dict[str, Path], tmp_path: Path) -> None:
    task, model = load_run(runs[name])
    folder = tokformer.save_pretrained(task, model, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    assert config["format"] == "tokformer-model" and config["task"]["name"] == name
    for file in (p for p in folder.rglob("*") if p.is_file()):
        assert not file.read_bytes().startswith(PICKLE_MAGIC), f"{file} looks pickled"
    loaded_task, loaded = tokformer.from_pretrained(folder)
    assert type(loaded_task) is type(task) and not loaded.training
    assert _same_weights(model, loaded)
    again = tokformer.save_pretrained(loaded_task, loaded, tmp_path / "again")  # a folder re-saves to the same bytes
    assert (again / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_tied_embeddings_are_stored_once(runs: dict[str, Path], tmp_path: Path) -> None:
    task, model = load_run(runs["lm"])
    folder = tokformer.save_pretrained(task, model, tmp_path / "lm")
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", framework="pt") as f:
        stored = set(f.keys())
    assert len(stored) < len(model.state_dict())  # the output layer is an alias of the embedding
    _, loaded = tokformer.from_pretrained(folder)
    assert _same_weights(model, loaded)


def _folder(tmp_path: Path, runs: dict[str, Path], name: str = "sort") -> Path:
    task, model = load_run(runs[name])
    return tokformer.save_pretrained(task, model, tmp_path / f"{name}-folder")


def _edit_config(folder: Path, **task_values: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["task"].update(task_values)
    (folder / "config.json").write_text(json.dumps(config))


BAD_FOLDERS = {
    "empty folder": (lambda p, f: p, ConfigError, "has no config.json and no .safetensors weights"),
    "missing path": (lambda p, f: p / "nope", ConfigError, "is not a run directory"),
    "pickled only": (lambda p, f: _pickled_only(p), ConfigError, "torch.load("),
    "no weights": (lambda p, f: _unlink(f / "model.safetensors", f), ConfigError, "has no .safetensors weights"),
    "unknown task": (lambda p, f: _edit(f, name="sortt"), ConfigError, "unknown task 'sortt'. Did you mean 'sort'?"),
    "unknown key": (lambda p, f: _edit(f, widht=3), ConfigError, "unknown task 'sort' option 'widht'"),
    "shape mismatch": (lambda p, f: _edit(f, d_model=32), CheckpointError, "shape: "),
    "tokenizer edited": (lambda p, f: _write(f / "tokenizer" / "vocab.json", "{}", f), ConfigError,
                         "is not the tokenizer"),
    "not json": (lambda p, f: _write(f / "config.json", "{oops", f), DataError, "config.json is not valid JSON"),
    "timm folder": (lambda p, f: _write(f / "config.json", '{"architecture": "vit_tiny"}', f), ConfigError,
                    "--init-from "),
}


def _pickled_only(path: Path) -> Path:
    torch.save({"w": torch.zeros(2)}, path / "pytorch_model.bin")
    (path / "config.json").write_text('{"model_type": "gpt2"}')
    return path


def _unlink(file: Path, folder: Path) -> Path:
    file.unlink()
    return folder


def _edit(folder: Path, **values: object) -> Path:
    _edit_config(folder, **values)
    return folder


def _write(file: Path, text: str, folder: Path) -> Path:
    file.write_text(text)
    return folder


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_bad_folders_are_refused_naming_the_problem(case: str, runs: dict[str, Path], tmp_path: Path) -> None:
    make, error, message = BAD_FOLDERS[case]
    empty = tmp_path / "empty"
    empty.mkdir()
    path = make(empty, _folder(tmp_path, runs))
    with pytest.raises(error) as raised:
        tokformer.load_model(path)
    assert message in str(raised.value)


def test_pickled_only_message_gives_a_working_conversion(tmp_path: Path) -> None:
    _pickled_only(tmp_path)
    with pytest.raises(ConfigError) as raised:
        tokformer.load_model(tmp_path)
    command = str(raised.value).split('python -c "')[1].rstrip('"')
    exec(command)  # noqa: S102 - the one-liner the message tells the user to run
    assert (tmp_path / "model.safetensors").is_file()


def test_a_model_folder_has_no_other_checkpoints(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="applies to run directories only"):
        tokformer.load_model(_folder(tmp_path, runs), checkpoint="latest")


def test_save_refuses_a_non_empty_directory(runs: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    task, model = load_run(runs["sort"])
    with pytest.raises(ConfigError, match="already exists"):
        tokformer.save_pretrained(task, model, tmp_path / "taken")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no temporary folder left behind


# -- init_from -----------------------------------------------------------------------------


def test_lm_init_from_a_folder_takes_its_tokenizer_and_shape(runs: dict[str, Path], tmp_path: Path) -> None:
    source_task, source_model = load_run(runs["lm"])
    folder = tokformer.save_pretrained(source_task, source_model, tmp_path / "lm")
    run = tmp_path / "ft"
    train("lm", init_from=str(folder), run_dir=str(run), d_model=64, n_heads=4, context_len=8, stdlib_bytes=30_000,
          batch_size=4, **{**TRAIN, "steps": 1, "eval_every": 1})
    assert tokenizer_fingerprint(run) == tokenizer_fingerprint(folder)  # no BPE trained: the folder's came along
    task, model = load_run(run)  # rebuilt from the run alone: the shape came along in its assets
    assert (task.config.d_model, task.config.context_len) == (16, 16)
    assert model.state_dict()["embedder.tokens.weight"].shape == source_model.state_dict()[
        "embedder.tokens.weight"].shape
    with pytest.raises(ConfigError, match="drop tokenizer="):
        train("lm", init_from=str(folder), tokenizer=str(folder / "tokenizer"), run_dir=str(tmp_path / "x"), **TRAIN)


def test_classify_init_from_a_classify_folder_keeps_its_weights(runs: dict[str, Path], tmp_path: Path) -> None:
    source_task, source_model = load_run(runs["classify"])
    folder = tokformer.save_pretrained(source_task, source_model, tmp_path / "vit")
    run = tmp_path / "ft"
    train("classify", init_from=str(folder), run_dir=str(run), train_size=16, eval_size=8, batch_size=8, d_model=64,
          **{**TRAIN, "steps": 1, "eval_every": 1, "lr": 1e-9, "warmup_steps": 0})
    task, model = load_run(run)
    assert task.config.d_model == 16 and task.config.image_size == 16
    before, after = source_model.state_dict(), model.state_dict()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)  # lr ~0: the source weights


@pytest.mark.parametrize("name", ["sort", "graph", "translate"])
def test_every_task_fine_tunes_from_its_own_folder_through_the_engine(name: str, runs: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    """No task code for it: the engine adopts the folder's architecture options (ours are asked
    for another width) and tokenizer, loads its weights, and the run resumes from its config alone."""
    source_task, source_model = load_run(runs[name])
    folder = tokformer.save_pretrained(source_task, source_model, tmp_path / "source")
    run = tmp_path / "ft"
    train(name, init_from=str(folder), run_dir=str(run), **{**TINY[name], "d_model": 48},
          **{**TRAIN, "steps": 1, "eval_every": 1, "lr": 1e-12, "warmup_steps": 0})
    saved = json.loads((run / "config.json").read_text())
    assert saved["task"]["d_model"] == source_task.config.d_model != 48  # the source's shape, recorded
    assert tokenizer_fingerprint(run, source_task.tokenizer_dirs()) == tokenizer_fingerprint(
        folder, source_task.tokenizer_dirs())
    _, model = load_run(run)
    before, after = source_model.state_dict(), model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)  # lr ~0: the source weights
    train(resume=str(run), steps=2, quiet=True)  # resumes without the source
    folder_gone = tmp_path / "moved"
    folder.rename(folder_gone)
    assert load_run(run)[1] is not None


def test_init_weights_keep_fresh_parameters_only_where_the_task_says() -> None:
    from tokformer.engine.finetune import InitialWeights, load_initial

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 3))
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    source = {"0.weight": torch.ones(4, 4), "0.bias": torch.ones(4), "1.weight": torch.ones(5, 4),
              "1.bias": torch.ones(5)}  # a head for 5 classes, ours has 3
    load_initial(model, InitialWeights(Path("src"), source), fresh_on_mismatch=("1.",))
    state = model.state_dict()
    assert torch.equal(state["0.weight"], torch.ones(4, 4)) and torch.equal(state["1.weight"], fresh["1.weight"])
    with pytest.raises(CheckpointError, match=r"init_from src does not fit .*shape: 1\.bias"):
        load_initial(model, InitialWeights(Path("src"), source), fresh_on_mismatch=())
    del source["1.weight"], source["1.bias"]  # a headless source: the head stays fresh
    load_initial(model, InitialWeights(Path("src"), source), fresh_on_mismatch=("1.",))
    with pytest.raises(CheckpointError, match="missing: 1.bias"):
        load_initial(model, InitialWeights(Path("src"), source), fresh_on_mismatch=())


@pytest.mark.parametrize(("task", "source", "message"), [
    ("classify", "lm", "holds a 'lm' model; task 'classify' cannot start from it"),
    ("lm", "classify", "holds a 'classify' model; task 'lm' cannot start from it"),
    ("lm", "timm-file", "is a timm image model's weights; task 'lm' cannot start from it"),
])
def test_init_from_another_architecture_is_one_line(task: str, source: str, message: str,
                                                    runs: dict[str, Path], tmp_path: Path) -> None:
    if source == "timm-file":
        path = tmp_path / "vit.safetensors"
        save_file({"patch_embed.proj.weight": torch.zeros(8, 3, 4, 4)}, path)
    else:
        path = _folder(tmp_path, runs, source)
    with pytest.raises(ConfigError, match="the architectures differ") as raised:
        train(task, init_from=str(path), run_dir=str(tmp_path / "run"), **TINY[task], **TRAIN)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()  # a refused run leaves no directory


def _tiny_timm(num_classes: int = 10):
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=num_classes)


def test_classify_init_from_a_rope_vit_hub_folder_through_the_one_timm_entry(tmp_path: Path) -> None:
    """A hub folder of timm's RoPE ViT (``Eva``): timm builds the named architecture offline, the one
    ``from_timm`` entry converts it, and the run keeps its logits and rebuilds from its own files."""
    import timm

    from tokformer.interop.timm import EvaSpec, from_timm

    model_args = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 1, "num_heads": 2}
    timm_model = randomised(timm.create_model("vit_small_patch16_rope_224", pretrained=False, num_classes=10,
                                              **model_args))
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file({k: v.contiguous() for k, v in timm_model.state_dict().items()}, hub / "model.safetensors")
    (hub / "config.json").write_text(json.dumps({"architecture": "vit_small_patch16_rope_224", "num_classes": 10,
                                                 "model_args": model_args}))
    run = tmp_path / "ft"
    train("classify", init_from=str(hub), run_dir=str(run), train_size=16, eval_size=8, batch_size=8,
          **{**TRAIN, "steps": 1, "eval_every": 1, "lr": 1e-12, "warmup_steps": 0})
    task, model = load_run(run)  # rebuilt from vit_spec.json: the family came along
    assert isinstance(task._vit_spec, EvaSpec) and json.loads((run / "vit_spec.json").read_text())["family"] == "eva"
    tokenizer, reference = from_timm(timm_model)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(task.tokenizer.batch(images)), reference(tokenizer.batch(images)),
                               atol=1e-4, rtol=1e-4)


def test_classify_init_from_a_timm_hub_folder_uses_its_preprocessing(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    timm_model = _tiny_timm(num_classes=4)  # another class count: the head is re-initialised
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file({k: v.contiguous() for k, v in timm_model.state_dict().items()}, hub / "model.safetensors")
    (hub / "config.json").write_text(json.dumps({
        "architecture": "vit_tiny_test", "num_classes": 4, "global_pool": "token",
        "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}}))
    run = tmp_path / "ft"
    train("classify", init_from=str(hub), run_dir=str(run), train_size=16, eval_size=8, batch_size=8,
          **{**TRAIN, "steps": 1, "eval_every": 1})
    task, model = load_run(run)
    assert task.tokenizer.mean == (0.5, 0.5, 0.5) and task.tokenizer.std == (0.25, 0.25, 0.25)
    assert task.tokenizer.image_size == (32, 32) and task.tokenizer.position == "learned"
    assert model.state_dict()["head.proj.weight"].shape == (10, 32)  # shapes has 10 classes
    folder = tokformer.save_pretrained(task, model, tmp_path / "exported")
    assert _same_weights(model, tokformer.from_pretrained(folder)[1])


def _hub_folder(folder: Path, model_args: object) -> Path:
    """A timm hub folder of :func:`_tiny_timm` under timm's registered ``vit_tiny_patch16_224``, with the
    given ``model_args`` (which must make the named model fit those weights)."""
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in _tiny_timm().state_dict().items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": model_args,
                                                    "pretrained_cfg": {"input_size": [3, 32, 32]}}))
    return folder


TINY_VIT_ARGS = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}


@pytest.mark.parametrize("extra, refused", [
    ({"checkpoint_path": "SECRET"}, "model_args.checkpoint_path is not an architecture option"),
    ({"pretrained": True, "pretrained_cfg_overlay": {"file": "SECRET"}}, "model_args.pretrained is not an"),
    ({"img_size": 100_000}, "describes a model of 5,000,032,042 parameters"),  # 20 GB asked of the allocator
    ({"embed_dim": 30_000}, "describes a model of 21,607,470,010 parameters"),
    ({"depth": 100_000}, "model_args.depth must be a number of blocks up to 1024, got 100000"),
    (None, "model_args must be an object, got [1, 2]"),
])
def test_a_timm_hub_folders_model_args_cannot_name_files_or_ask_for_a_huge_model(tmp_path: Path, extra: object,
                                                                                   refused: str) -> None:
    """``timm.create_model(**model_args)`` took whatever the folder's config.json held: ``checkpoint_path``
    made timm read any file on the machine (``/etc/passwd``: an IndexError; a weights file elsewhere: loaded),
    and the model was built at any size (``img_size: 100000`` asked for 30 GB) before its weights were looked
    at. create_model's own options are refused, and the model is sized on the meta device first (H10)."""
    pytest.importorskip("timm")
    secret = tmp_path / "elsewhere.safetensors"
    save_file({k: v.contiguous() for k, v in _tiny_timm().state_dict().items()}, secret)
    model_args = [1, 2] if extra is None else json.loads(json.dumps({**TINY_VIT_ARGS, **extra}).replace("SECRET",
                                                                                                        str(secret)))
    hub = _hub_folder(tmp_path / "hub", model_args)
    with pytest.raises(ConfigError, match=re.escape(refused)):
        train("classify", init_from=str(hub), run_dir=str(tmp_path / "run"), **TINY["classify"], **TRAIN)
    assert not (tmp_path / "run").exists()


def test_a_timm_hub_folders_model_args_still_shape_the_model(tmp_path: Path) -> None:
    """The control for the refusals above: the architecture options pass, and make timm's named model fit."""
    pytest.importorskip("timm")
    hub = _hub_folder(tmp_path / "hub", TINY_VIT_ARGS)
    train("classify", init_from=str(hub), run_dir=str(tmp_path / "run"), **TINY["classify"], **TRAIN)
    task, model = load_run(tmp_path / "run")
    assert model.state_dict()["head.proj.weight"].shape[1] == 32 and task.tokenizer.image_size == (32, 32)


@pytest.mark.slow  # two training runs compared (~6 s); init_from loading itself is tested above
def test_fine_tuning_a_pretrained_vit_beats_training_from_scratch(tmp_path: Path) -> None:
    """Pretrain a timm-shaped ViT on shapes, save it as a timm .safetensors file (with a 3-class head, so
    fine-tuning re-initialises it), then fine-tune on other shapes images: equal steps, same architecture,
    only the starting weights differ. Measured margin ~0.25 accuracy; asserted 0.1."""
    pytest.importorskip("timm")
    random_file = tmp_path / "random.safetensors"
    save_file({k: v.contiguous() for k, v in _tiny_timm().state_dict().items()}, random_file)
    common = {"device": "cpu", "quiet": True, "batch_size": 32, "warmup_steps": 10, "lr": 3e-3, "eval_every": 1000,
              "image_size": 32, "flip": False, "label_smoothing": 0.0}
    train("classify", init_from=str(random_file), run_dir=str(tmp_path / "pre"), steps=300, train_size=4000,
          eval_size=100, data_seed=1, **common)
    task, model = load_run(tmp_path / "pre")
    state = to_timm_state_dict(model.state_dict(), task._vit_spec)
    state["head.weight"], state["head.bias"] = torch.randn(3, 32), torch.zeros(3)
    pretrained_file = tmp_path / "pretrained.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, pretrained_file)
    accuracy = {}
    for name, init in (("fine-tuned", pretrained_file), ("scratch", random_file)):
        result = train("classify", init_from=str(init), run_dir=str(tmp_path / name), steps=40, train_size=256,
                       eval_size=500, data_seed=7, **common)
        accuracy[name] = result.metrics["accuracy"]
    assert accuracy["fine-tuned"] > accuracy["scratch"] + 0.1, accuracy


def test_lm_init_from_a_hugging_face_folder(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")  # only to write the folder: reading it is our own code
    from tokformer.tokenizers.bpe import BPETokenizer

    tokenizer = BPETokenizer.train(["def add(a, b):\n    return a + b\n" * 20], 300, special_tokens=["<|endoftext|>"])
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "hf", safe_serialization=True)
    tokenizer.save_hf_json(tmp_path / "hf" / "tokenizer.json")
    _, source = tokformer.from_pretrained(tmp_path / "hf")
    train("lm", init_from=str(tmp_path / "hf"), run_dir=str(tmp_path / "run"), stdlib_bytes=30_000, batch_size=4,
          **{**TRAIN, "steps": 1, "eval_every": 1, "lr": 1e-9, "warmup_steps": 0})
    task, model = load_run(tmp_path / "run")
    assert (task.config.d_model, task.config.context_len) == (32, 32)
    assert all(torch.allclose(v, model.state_dict()[k], atol=1e-6) for k, v in source.state_dict().items())
