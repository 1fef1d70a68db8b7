"""Maps the design card's top-level folders onto one importable namespace, ``voxledger.*``."""

from setuptools import find_packages, setup

ROOTS = {
    "voxledger": "voxledger",
    "voxledger.schemas": "schemas",
    "voxledger.stores": "stores",
    "voxledger.tasks": "tasks",
    "voxledger.flows": "flows",
    "voxledger.dashboards": "dashboards",
}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(
    packages=packages,
    package_dir=ROOTS,
    package_data={"": ["*.json", "*.yaml", "*.txt", "*.html", "*.js", "*.css", "data/*", "json/*"]},
)
