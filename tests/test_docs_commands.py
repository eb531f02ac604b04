"""Commands and options that the docs show, checked against the command line."""

import pytest

from embedscope.cli import main


@pytest.mark.parametrize("command", ["embed", "saliency"])
def test_dataset_help_names_shapes(command, capsys):
    """docs/properties.md embeds `--dataset shapes --root shapes_set` (and saliency takes it too): the
    --dataset help of embed and saliency names shapes, as train's does."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--dataset DATASET digits, shapes" in out
