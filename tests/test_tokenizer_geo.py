"""The worked example in docs/example_geo_tokenizer.md, executed from the document itself."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from tokformer.tokenizers import Tokenizer, TokenizerError, load_tokenizer, registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "example_geo_tokenizer.md"


@pytest.fixture(scope="module")
def geo_class() -> type[Tokenizer]:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    registry.import_builtin_tokenizers()  # so restoring the registry below drops the example's tokenizer only
    saved = dict(registry._REGISTRY)
    namespace: dict = {"__name__": "geo_example"}
    exec(compile(code, str(DOC), "exec"), namespace)
    yield namespace["GeoPointTokenizer"]
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def test_batch_has_features_mask_and_lat_lon_positions(geo_class):
    tokenizer = geo_class(num_values=2, scale=10.0)
    batch = tokenizer.batch([[(48.1, 11.6, 12.0, 1.0), (-33.9, 151.2, 21.5, 2.0)], [(0.0, 90.0, 30.0, 3.0)]])
    assert batch.mask.tolist() == [[True, True], [True, False]]
    assert batch.features.shape == (2, 2, 2)
    assert torch.allclose(batch.features[1, 0], torch.tensor([3.0, 0.3]))
    assert torch.allclose(batch.positions[1, 0], torch.tensor([0.0, 1.0, 1.0, 0.0]), atol=1e-6)
    lat = math.radians(48.1)
    assert batch.positions[0, 0, 0].item() == pytest.approx(math.sin(lat), abs=1e-6)


def test_date_line_neighbours_get_nearly_equal_positions(geo_class):
    batch = geo_class().batch([[(10.0, 179.9, 1.0), (10.0, -179.9, 1.0), (10.0, 0.0, 1.0)]])
    east, west, greenwich = batch.positions[0]
    assert (east - west).norm() < 0.01 < (east - greenwich).norm()


def test_embedder_maps_to_d_model_and_ignores_token_order(geo_class):
    tokenizer = geo_class(num_values=1)
    points = [(48.1, 11.6, 12.0), (-33.9, 151.2, 21.5), (64.1, -21.9, -3.0)]
    embedder = tokenizer.build_embedder(32)
    forward = embedder(tokenizer.batch([points]))
    backward = embedder(tokenizer.batch([points[::-1]]))
    assert forward.shape == (1, 3, 32)
    assert torch.allclose(forward[0], backward[0].flip(0), atol=1e-6)


def test_registered_by_name_saves_and_loads(geo_class, tmp_path):
    assert registry.get_tokenizer_class("geo_points") is geo_class
    geo_class(num_values=3, scale=2.5).save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, geo_class)
    assert loaded.get_config() == {"num_values": 3, "scale": 2.5}


def test_rejects_impossible_coordinates(geo_class):
    with pytest.raises(TokenizerError, match="latitude"):
        geo_class().batch([[(91.0, 0.0, 1.0)]])
