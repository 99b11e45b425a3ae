"""The IPython magics: ``%%distribute`` and its line magics. Only wiring; every step lives in another room."""
