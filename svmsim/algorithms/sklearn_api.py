"""What svmsim's scikit-learn estimators share (not a family: it registers no algorithm)."""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["BinaryClassifier", "LinearBinaryClassifier", "binary_fit_data"]


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


class BinaryClassifier(ClassifierMixin, BaseEstimator):
    """A binary classifier that accepts sparse input and predicts classes_[1] where its decision_function is > 0
    (>= 0 where the class sets `ties_to_positive`, as the solvers of paper 000's sign convention do)."""

    ties_to_positive = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = False
        return tags

    def predict(self, X):
        score = self.decision_function(X)
        positive = score >= 0 if self.ties_to_positive else score > 0
        return np.where(positive, self.classes_[1], self.classes_[0])


class LinearBinaryClassifier(BinaryClassifier):
    """A fitted linear binary classifier: coef_ (1, d), intercept_ (1,), classes_; sparse input accepted."""

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return np.asarray(X @ self.coef_[0]).ravel() + self.intercept_[0]
