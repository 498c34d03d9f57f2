"""What svmsim's scikit-learn estimators share (not a family: it registers no algorithm)."""
from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

__all__ = ["binary_fit_data"]


def binary_fit_data(estimator, X, y):
    """The validated (X, y) of a binary classifier's `fit`: X as float64 (CSR kept), its classes, and y mapped to
    -1 (classes[0]) and +1 (classes[1]). Anything but two classes is refused with scikit-learn's message."""
    X, y = validate_data(estimator, X, y, accept_sparse="csr", dtype=np.float64)
    check_classification_targets(y)
    classes = np.unique(y)
    if classes.size != 2:
        raise ValueError(f"Only binary classification is supported: {type(estimator).__name__} got {classes.size} "
                         f"class{'es' if classes.size != 1 else ''} in y; allowed: exactly 2 classes")
    return X, classes, np.where(y == classes[1], 1.0, -1.0)
