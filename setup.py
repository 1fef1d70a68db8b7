"""Package configuration is in pyproject.toml; this file only quiets one setuptools notice.

An editable install warns that a folder named like the package may shadow it on import; in a
checkout that folder is the package itself (the design card's top-level folders are links into it).
"""

import warnings

from setuptools import setup

warnings.filterwarnings("ignore", message=r"Editable installation\.")

setup()
