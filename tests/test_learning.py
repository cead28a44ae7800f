from aayn.copy_task import copy_exact_match, train_copy_task


def test_a_tiny_model_learns_the_copy_task():
    """The Annotated Transformer's sanity check; 400 steps take about 7 s on a 2-core CPU (see README)."""
    model = train_copy_task()
    assert copy_exact_match(model) >= 0.99
