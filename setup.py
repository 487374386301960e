"""Maps the repository's top-level folders onto the `kvconform` import package.

`reference/` -> `kvconform.reference`, `backends/` -> `kvconform.backends`,
`conformance/` -> `kvconform.conformance`, `adapters/` -> `kvconform.adapters`, `spec/` -> `kvconform.spec`
(Markdown only, read by `kvconform coverage`). Subpackages are discovered so new kernel folders need no edit here.
"""
from setuptools import find_namespace_packages, setup

ROOTS = {
    "kvconform.reference": "reference",
    "kvconform.backends": "backends",
    "kvconform.conformance": "conformance",
    "kvconform.adapters": "adapters",
}

packages = ["kvconform", "kvconform.spec"]
for package, folder in ROOTS.items():
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

setup(
    packages=packages,
    package_dir={"kvconform": "kvconform", "kvconform.spec": "spec", **ROOTS},
    package_data={"kvconform.spec": ["*.md"], "": ["*.toml", "*.html", "*.css", "*.js"]},
)
