"""What data svmsim knows by name: the built-in data sets and the feature scalings (`registry` loads them). Plain
declarations, so that checking a scenario's ``[data]`` table imports no loader.
"""
from __future__ import annotations

__all__ = ["BUILTIN_DATASETS", "SCALINGS"]

#: Built-in data sets that need no file (loaded through scikit-learn), with a one-line description.
BUILTIN_DATASETS = {
    "iris": "sklearn iris, setosa -> -1 vs. the other two classes -> +1, features scaled to [-1, 1]; n=150, d=4",
    "breast_cancer_sklearn": "sklearn breast cancer, benign -> +1, malignant -> -1, features scaled to [-1, 1]; "
    "n=569, d=30",
}

#: Feature scalings of `load_dataset` (fitted on the training set, applied to both sets).
SCALINGS = {
    "none": "the features as stored",
    "unit_box": "each feature linearly to [-1, 1] by its training range (LIBSVM's svm-scale; sparse input "
                "becomes dense)",
    "max_abs": "each feature divided by its largest training |value| (keeps sparse input sparse)",
}
