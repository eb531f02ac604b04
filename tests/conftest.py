import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402

matplotlib.use("Agg", force=True)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one thread each avoids oversubscription
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass
