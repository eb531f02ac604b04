#!/usr/bin/env bash
# The end-to-end demo on the built-in digits (classes 0-4 train, 5-9 test). Run by `make demo`.
# Every step is a plain `embedscope` command; outputs go to demo-output/ (replaced on each run).
set -euo pipefail
ES=${ES:-.venv/bin/embedscope}
D=${DEMO:-demo-output}
mkdir -p "$D"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. Train two digits models: margin loss, and margin with rho-regularisation (p_switch 0.3)"
# Watch the log: without regularisation the training-set rho climbs while test R@1 (unseen
# classes 5-9) falls below the untrained model's; with it, rho stays low and test R@1 rises.
$ES train --dataset digits --arch digits_cnn --loss margin --embed-dim 32 --epochs 10 --seed 0 -o "$D/digits_margin.pt" --force
$ES train --dataset digits --arch digits_cnn --loss margin --p-switch 0.3 --embed-dim 32 --epochs 10 --seed 0 -o "$D/digits_rmargin.pt" --force

step "2. Embed train + test into HDF5"
$ES embed "$D/digits_margin.pt" --dataset digits --split all -o "$D/digits.h5" --force
$ES embed "$D/digits_rmargin.pt" --dataset digits --split all -o "$D/digits_rmargin.h5" --force
$ES info "$D/digits.h5"

step "3. Retrieval and clustering metrics on the test split (classes 5-9, never seen in training)"
$ES evaluate "$D/digits.h5" --split test --json "$D/evaluate.json" --csv "$D/evaluate.csv" --force
$ES evaluate "$D/digits_rmargin.h5" --split test --json "$D/evaluate_rmargin.json" --force

step "3b. Which image properties do the embeddings cluster? (Kobs et al.; Normalized R-Precision)"
# two per-image properties of the digits joined on the image path: ink (quartile of the summed
# pixel values) and parity (odd/even digit; it follows the class, so it is not independent of it)
${PY:-.venv/bin/python} - > "$D/digit_props.csv" <<'PYEOF'
import numpy as np
from sklearn.datasets import load_digits
d = load_digits()
ink = d.images.reshape(len(d.images), -1).sum(1)
q = np.searchsorted(np.quantile(ink, [0.25, 0.5, 0.75]), ink, side="right")
print("path,ink,parity")
for i in range(len(ink)):
    print(f"digits/{i:04d},{q[i]},{d.target[i] % 2}")
PYEOF
$ES add-properties "$D/digits.h5" "$D/digit_props.csv" --force
$ES properties "$D/digits.h5" --split test -o "$D/properties.png" --csv "$D/properties.csv" --force

step "4. Geometry of the training embeddings: rho, pi, effective rank, ..."
$ES geometry "$D/digits.h5" --split train --json "$D/geometry.json" --csv "$D/geometry.csv" --force
$ES geometry "$D/digits_rmargin.h5" --split train --json "$D/geometry_rmargin.json" --force
$ES spectrum "$D/digits.h5" "$D/digits_rmargin.h5" --names margin "R-margin" --split train --by-class -o "$D/spectrum.png" --force

step "5. Pictures: joint t-SNE, yoked t-SNE of the two models, same-vs-different scatter"
$ES tsne "$D/digits.h5" --joint -o "$D/tsne_joint.png" --force
$ES yoke "$D/digits.h5" "$D/digits_rmargin.h5" --names "margin" "R-margin (p_switch 0.3)" --split test -o "$D/yoked.png" --force
$ES scatter "$D/digits.h5" -o "$D/scatter.png" --force

step "6. A small grid of models for a study (3 losses x 2 p_switch; finished runs are skipped)"
$ES train-grid --dataset digits --losses margin triplet multisimilarity --p-switch 0 0.3 --seeds 0 --embed-dim 32 --epochs 8 -o "$D/runs"

step "7. Saliency (Kobs et al.): do the two models look at the same pixels as each other, and as an untrained one?"
# 40 test digits, 50 noisy copies each; the untrained network is the same architecture after 0 epochs
$ES train --dataset digits --arch digits_cnn --loss margin --embed-dim 32 --epochs 0 --seed 0 -o "$D/digits_untrained.pt" --force
for m in margin rmargin untrained; do
  $ES saliency "$D/digits_$m.pt" --dataset digits --n-images 40 -o "$D/saliency_$m.h5" --force
done
$ES saliency-agreement "$D/saliency_margin.h5" "$D/saliency_rmargin.h5" "$D/saliency_untrained.h5" --names margin "R-margin" untrained -o "$D/saliency_agreement.png" --grid "$D/saliency_grid.png" --json "$D/saliency_agreement.json" --force
$ES saliency "$D/digits_margin.pt" --dataset digits --n-images 6 --pairs -o "$D/saliency_pairs.h5" --figure "$D/saliency_pairs.png" --force

step "Done: results in $D/"
ls "$D"
