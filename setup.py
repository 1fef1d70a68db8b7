"""The one package is ``voxledger``; the design card's top-level folders (schemas/, stores/, tasks/,
flows/, dashboards/, plans/) are links into it, so imports, static tools and wheels see one tree."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["voxledger", "voxledger.*"]),
    package_data={
        "voxledger": ["plans/*.yaml", "tasks/backends/tiny/shipped/tree/*"],
        "": ["*.json", "*.yaml", "*.txt", "*.html", "*.js", "*.css", "data/*", "json/*"],
    },
)
