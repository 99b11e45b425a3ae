"""Sweeps: a cell run once per member of a search, with its search (grid, random, Optuna), early stopping, the judge
of members' metrics, the study on disk and the comparison view's rows."""
