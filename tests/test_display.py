"""The terminal line of a ranked prediction."""

from tokformer.tasks.display import show_ranked


def test_show_ranked_names_each_class_with_three_decimals():
    assert show_ranked("cat.png", [("cat", 0.91234), ("dog", 0.05)]) == "cat.png: cat 0.912, dog 0.050"
