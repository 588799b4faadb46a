"""Hugging Face causal-LM folders in and out: GPT-2 and the Llama layout (Llama, Mistral, Qwen2).

Reference models are built at random by ``transformers`` itself (offline), every weight
randomised, saved as real folders; tokformer loads them and must give the same logits,
the same greedy continuations, and a bit-exact round trip. The folders tokformer writes
must load in ``AutoModelForCausalLM`` and ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from hf_models import FAMILIES, TEXT, VOCAB_ROWS, build_reference, outside_repo, tokformer_logits, transformers

from tokformer.cli import main
from tokformer.errors import TokformerError, UsageError
from tokformer.generation import generate, left_pad
from tokformer.interop import hf
from tokformer.sampling import SamplingConfig
from tokformer.tasks.sort import SortConfig, SortTask
from tokformer.tokenizers.bpe import BPETokenizer


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train([TEXT], 300, special_tokens=[hf.EOT])


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def reference(request, tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp(request.param)
    return request.param, build_reference(request.param, folder, tokenizer), folder


def test_logits_match(reference, tokenizer) -> None:
    kind, ref, folder = reference
    task, ours = hf.load_hf_folder(folder)
    ids = torch.tensor([tokenizer.encode("def add(a, b): The quick brown fox")[:20]] * 2)
    ids[1, 3:9] = torch.arange(250, 256)  # rows differ
    with torch.no_grad():
        expected = ref(input_ids=ids).logits
    got = tokformer_logits(ours, ids)
    assert got.shape == (2, ids.shape[1], VOCAB_ROWS)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert expected.std() > 0.5  # randomised weights: logits far from flat, so the comparison means something


def test_greedy_continuations_are_token_identical(reference, tokenizer) -> None:
    kind, ref, folder = reference
    _, ours = hf.load_hf_folder(folder)
    prompt = tokenizer.encode("The quick brown")
    steps = 32  # every family's context (>= 40) holds the prompt and 32 new tokens
    expected = ref.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                            max_new_tokens=steps, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
    ids, mask = left_pad([prompt])
    got = generate(ours, ids, mask, max_new_tokens=steps, sampling=SamplingConfig(temperature=0.0))[0]
    assert len(expected) == steps and got == expected


def test_save_hf_folder_refuses_another_tasks_model_or_weights_not_its_own(reference, tmp_path) -> None:
    """A sort task's was `AttributeError: 'SortTask' object has no attribute 'tokenizer'`; another model's
    weights wrote a folder that failed only when loaded. Both are refused before anything is written."""
    _, _, folder = reference
    task, ours = hf.load_hf_folder(folder)
    sort = SortTask(SortConfig(d_model=16, n_heads=2, n_layers=1, seq_len=4))
    with pytest.raises(UsageError, match="writes an lm model as a Hugging Face causal LM, not a 'sort' model"):
        hf.save_hf_folder(sort, sort.build_model(), tmp_path / "out")
    with pytest.raises(UsageError, match="save_hf_folder: .*does not fit .*missing"):
        hf.save_hf_folder(task, torch.nn.Linear(2, 2), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_round_trip_is_bit_exact(reference, tmp_path) -> None:
    kind, ref, folder = reference
    task, ours = hf.load_hf_folder(folder)
    hf.save_hf_folder(task, ours, tmp_path / "out")
    written = hf.read_state(tmp_path / "out")
    original = {k: v for k, v in ref.state_dict().items() if not (task.config.tie_embeddings and k == "lm_head.weight")}
    assert written.keys() == original.keys()
    for key, value in original.items():
        assert torch.equal(written[key], value), key
    back_task, back = hf.load_hf_folder(tmp_path / "out")
    assert back_task.config == task.config
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_exported_folder_loads_in_transformers(reference, tokenizer, tmp_path) -> None:
    kind, ref, folder = reference
    task, ours = hf.load_hf_folder(folder)
    out = hf.save_hf_folder(task, ours, tmp_path / "out")
    with outside_repo(tmp_path):
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer.encode("lazy dog. Über")])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, ref(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    for text in ("def add(a, b):\n    return a + b", "Über den Wolken<|endoftext|>x", "  spaces\t\ttabs 123"):
        assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text, allowed_special="all")
    # Mistral within one sliding window computes what Llama computes, and exports as Llama.
    assert type(reloaded).__name__ == type(ref).__name__.replace("Mistral", "Llama")


def test_a_tokformer_trained_llama_exports(tmp_path, tokenizer) -> None:
    """A model built by the lm task (not converted) picks its family from its options and exports."""
    from tokformer.tasks.lm import LMConfig, LMTask, build_lm

    cfg = LMConfig(d_model=32, n_heads=4, n_layers=1, context_len=32, position="rope", norm="rms", mlp="swiglu",
                   n_kv_heads=2, bias=False, qkv_bias=True, vocab_size=300)
    task = LMTask(cfg)
    task.tokenizer = tokenizer
    model = build_lm(tokenizer, cfg).eval()
    out = hf.save_hf_folder(task, model, tmp_path / "qwen")
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([tokenizer.encode("The quick brown fox")])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, tokformer_logits(model, ids), atol=1e-5, rtol=1e-5)


def test_cli_generates_what_transformers_generates(tmp_path, tokenizer) -> None:
    folder = tmp_path / "gpt2"
    ref = build_reference("gpt2", folder, tokenizer)
    prompt = tokenizer.encode("The quick")
    expected = ref.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                            max_new_tokens=20, do_sample=False, pad_token_id=0)[0].tolist()
    result = CliRunner().invoke(main, ["generate", str(folder), "-p", "The quick", "-n", "20", "-t", "0"])
    assert result.exit_code == 0, result.output
    assert result.output == tokenizer.decode(expected) + "\n"


def test_cli_adds_the_bos_token_the_tokenizer_adds(tmp_path, tokenizer) -> None:
    """A tokenizer.json whose post-processor puts a BOS before the text: generate does as transformers does."""
    folder = tmp_path / "llama"
    ref = build_reference("llama-gqa", folder, tokenizer)
    document = json.loads((folder / "tokenizer.json").read_text())
    eot_id = tokenizer.special_tokens[hf.EOT]
    document["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": hf.EOT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {hf.EOT: {"id": hf.EOT, "ids": [eot_id], "tokens": [hf.EOT]}},
    }
    (folder / "tokenizer.json").write_text(json.dumps(document))
    with outside_repo(tmp_path):
        ids = transformers.AutoTokenizer.from_pretrained(folder)("lazy dog")["input_ids"]
    assert ids[0] == eot_id  # transformers' tokenizer does add it
    expected = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            max_new_tokens=12, do_sample=False, pad_token_id=0)[0, len(ids):].tolist()
    result = CliRunner().invoke(main, ["generate", str(folder), "-p", "lazy dog", "-n", "12", "-t", "0"])
    assert result.exit_code == 0, result.output
    assert result.output == "lazy dog" + tokenizer.decode(expected) + "\n"


def _folder(tmp_path: Path, tokenizer: BPETokenizer, config: dict) -> Path:
    build_reference("llama-gqa", tmp_path, tokenizer)
    (tmp_path / "config.json").write_text(json.dumps({**json.loads((tmp_path / "config.json").read_text()), **config}))
    return tmp_path


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "falcon"}, "model_type 'falcon' is not supported"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}}, "rope_type='llama3'"),
    ({"head_dim": 16}, "head_dim=16"),
    ({"hidden_act": "relu2"}, "hidden_act='relu2'"),
    ({"num_hidden_layers": 3}, "missing: encoder.blocks.2"),
    ({"intermediate_size": 70}, "does not fit"),
])
def test_unsupported_or_inconsistent_config_is_one_line_error(tmp_path, tokenizer, change, message) -> None:
    folder = _folder(tmp_path, tokenizer, change)
    with pytest.raises(TokformerError, match=message.replace("(", r"\(").replace("[", r"\[")) as info:
        hf.load_hf_folder(folder)
    assert "\n" not in str(info.value)
    result = CliRunner().invoke(main, ["generate", str(folder), "-p", "x", "-n", "2"])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_pickle_only_folder_says_how_to_convert(tmp_path, tokenizer) -> None:
    folder = _folder(tmp_path, tokenizer, {})
    state = hf.read_state(folder)
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(TokformerError, match="pickle.*save_file"):
        hf.load_hf_folder(folder)


def test_vocab_and_merges_files_load_like_tokenizer_json(tmp_path, tokenizer) -> None:
    """GPT-2's original vocab.json + merges.txt instead of tokenizer.json: the same ids, the same model."""
    folder = tmp_path / "gpt2"
    build_reference("gpt2", folder, tokenizer)
    (folder / "tokenizer.json").unlink()
    tokenizer.save_vocab_merges(folder)
    task, _ = hf.load_hf_folder(folder)
    for text in ("def add(a, b):\n    return a + b", "Über den Wolken<|endoftext|>x"):
        assert task.tokenizer.encode(text, allowed_special="all") == tokenizer.encode(text, allowed_special="all")


def test_missing_tokenizer_is_named(tmp_path, tokenizer) -> None:
    folder = _folder(tmp_path, tokenizer, {})
    (folder / "tokenizer.json").unlink()
    with pytest.raises(TokformerError, match="no tokenizer.json or vocab.json"):
        hf.load_hf_folder(folder)


def test_sharded_checkpoint_loads(tmp_path, tokenizer) -> None:
    """A model.safetensors.index.json with several shards loads like one file."""
    folder = tmp_path / "sharded"
    ref = build_reference("llama-gqa", folder, tokenizer)
    (folder / "model.safetensors").unlink()
    ref.save_pretrained(folder, max_shard_size="20KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    _, ours = hf.load_hf_folder(folder)
    ids = torch.tensor([tokenizer.encode("quick brown")])
    with torch.no_grad():
        torch.testing.assert_close(tokformer_logits(ours, ids), ref(input_ids=ids).logits, atol=1e-4, rtol=1e-4)


def test_models_with_no_hf_family_are_refused(tokenizer) -> None:
    from tokformer.tasks.lm import LMConfig, LMTask, build_lm

    for options, message in ((dict(layer_scale=1e-2), "layer_scale"), (dict(norm="rms"), "norm"),
                             (dict(position="rope", norm="rms", mlp="plain"), "mlp")):
        cfg = LMConfig(d_model=16, n_heads=2, n_layers=1, context_len=16, vocab_size=300, **options)
        task = LMTask(cfg)
        task.tokenizer = tokenizer
        with pytest.raises(TokformerError, match=message):
            hf.save_hf_folder(task, build_lm(tokenizer, cfg), "/nonexistent/never-written")
