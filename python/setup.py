# The gradstream Python package. Install from a build tree, where the
# library sits beside the sources (cmake's gs_python target puts both in
# build/python):
#   python3 -m pip install build/python
# (Debian's system Python also wants --break-system-packages, or use a venv.)
from setuptools import setup

setup(
    name="gradstream",
    version="0.1.0",
    description="gradstream parameter-server client for PyTorch training scripts",
    packages=["gradstream"],
    package_data={"gradstream": ["libgradstream_c.so"]},
    python_requires=">=3.8",
)
