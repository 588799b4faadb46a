"""Config layers: unknown keys, type coercion, precedence, config files."""

from dataclasses import dataclass
from typing import Literal

import pytest

from tokformer.errors import ConfigError
from tokformer.runtime.config import (
    TrainConfig,
    build_dataclass,
    coerce,
    load_config_file,
    parse_override,
    resolve,
)


@dataclass
class Toy:
    width: int = 4
    rate: float = 0.5
    flag: bool = False
    mode: Literal["a", "b"] = "a"
    limit: int | None = None
    scales: tuple[float, ...] = (1.0,)
    lr: float = 0.1  # collides with TrainConfig.lr on purpose


def toy_cls(name: str) -> type:
    if name != "toy":
        raise ConfigError(f"unknown task '{name}'")
    return Toy


def test_unknown_key_names_it_suggests_and_lists_valid_ones():
    with pytest.raises(ConfigError) as e:
        build_dataclass(TrainConfig, {"learning_rat": 1}, "train")
    message = str(e.value)
    assert "'learning_rat'" in message and "Valid options:" in message and "batch_size" in message
    with pytest.raises(ConfigError, match="Did you mean 'steps'"):
        build_dataclass(TrainConfig, {"stepz": 1}, "train")


@pytest.mark.parametrize(
    ("value", "tp", "expected"),
    [
        ("12", int, 12),
        ("1e-3", float, 1e-3),
        (3, float, 3.0),
        ("yes", bool, True),
        ("off", bool, False),
        ("none", int | None, None),
        ("7", int | None, 7),
        ("b", Literal["a", "b"], "b"),
        ("1, 2.5", tuple[float, ...], (1.0, 2.5)),
        ([1, 2], tuple[float, ...], (1.0, 2.0)),
    ],
)
def test_coerce_parses_strings_from_flags_and_yaml(value, tp, expected):
    assert coerce(value, tp, "k") == expected


@pytest.mark.parametrize(
    ("value", "tp", "needle"),
    [("abc", int, "expected an integer"), ("x", float, "expected a number"), (1.5, int, "expected an integer"),
     ("maybe", bool, "true or false"), ("c", Literal["a", "b"], "one of a, b"), (True, int, "integer"),
     (3, str, "expected a string"), (10 ** 400, float, "is not a finite number"),
     ("1e999", float, "is not a finite number")],
)
def test_coerce_rejects_wrong_types_with_the_key(value, tp, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        coerce(value, tp, "train.steps")
    assert "train.steps" in str(e.value)


def test_post_init_validation_becomes_config_error():
    with pytest.raises(ConfigError, match="steps must be positive"):
        build_dataclass(TrainConfig, {"steps": "0"}, "train")
    with pytest.raises(ConfigError, match="lr must be positive"):
        build_dataclass(TrainConfig, {"lr": -1}, "train")


def test_precedence_defaults_then_base_then_overrides():
    base = {"task": {"name": "toy", "width": 8, "rate": 0.25}, "train": {"steps": 50, "seed": 3}}
    cfg = resolve(None, base, {"width": "16", "train.seed": "5", "task.lr": "0.5"}, toy_cls)
    assert cfg.task == "toy"
    assert (cfg.task_config.width, cfg.task_config.rate, cfg.task_config.lr) == (16, 0.25, 0.5)
    assert (cfg.train.steps, cfg.train.seed, cfg.train.lr) == (50, 5, TrainConfig().lr)


def test_ambiguous_bare_key_must_be_qualified():
    with pytest.raises(ConfigError, match="train.lr or task.lr"):
        resolve("toy", None, {"lr": "1"}, toy_cls)


def test_unknown_override_and_unknown_section():
    with pytest.raises(ConfigError, match="Did you mean 'width'"):
        resolve("toy", None, {"widht": "1"}, toy_cls)
    with pytest.raises(ConfigError, match="section must be"):
        resolve("toy", None, {"model.width": "1"}, toy_cls)
    with pytest.raises(ConfigError, match="unknown top-level key 'trian'"):
        resolve("toy", {"trian": {}}, {}, toy_cls)


def test_task_name_is_required_somewhere():
    with pytest.raises(ConfigError, match="no task given"):
        resolve(None, {"train": {"steps": 5}}, {}, toy_cls)


def test_round_trip_through_saved_dict():
    cfg = resolve("toy", None, {"scales": "2,3", "mode": "b"}, toy_cls)
    again = resolve(None, cfg.to_dict(), {}, toy_cls)
    assert again == cfg


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("c.toml", '[task]\nname = "toy"\nwidth = 6\n[train]\nlr = 3e-4\n'),
        ("c.yaml", "task:\n  name: toy\n  width: 6\ntrain:\n  lr: 3e-4\n"),  # YAML reads 3e-4 as a string
        ("c.json", '{"task": {"name": "toy", "width": 6}, "train": {"lr": 0.0003}}'),
    ],
)
def test_config_files_in_every_format(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    cfg = resolve(None, load_config_file(path), {}, toy_cls)
    assert cfg.task_config.width == 6 and cfg.train.lr == pytest.approx(3e-4)


def test_bad_config_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[task\nname=")
    with pytest.raises(ConfigError, match="malformed"):
        load_config_file(bad)
    odd = tmp_path / "c.ini"
    odd.write_text("x")
    with pytest.raises(ConfigError, match="unknown format"):
        load_config_file(odd)


def test_parse_override():
    assert parse_override("train.lr = 3e-4") == ("train.lr", "3e-4")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("lr")
