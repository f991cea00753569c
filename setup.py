"""vit-jax: Vision Transformer training and checkpoints in JAX/Flax.

Floors, for library users, are the versions this project was first tested with (2026-11); the
exact versions of the last passing test run are pinned in constraints.txt, which
scripts/setup.sh installs (docs/troubleshooting.md). For GPUs install `jax[cuda12]` (or `jax[tpu]` on a TPU VM) before or
after this package; see README.md.
"""

import setuptools

INSTALL_REQUIRES = [
    'absl-py>=2.1',
    # Random access to TFDS data (ArrayRecord): constant-time resume of the train stream.
    'array-record>=0.8.6; sys_platform == "linux"',
    'clu>=0.0.12',
    'flax>=0.12.8',
    # timm-format weights from the Hugging Face hub (vit_jax/weights/timm_files.py): cache, token, offline.
    'huggingface_hub>=0.30',
    'importlib_resources>=6.0',  # tensorflow-datasets needs it to prepare data; undeclared.
    'jax>=0.10.2',
    'matplotlib>=3.8',
    'ml-collections>=1.1.0',
    'numpy>=2.0',
    'optax>=0.2.8',
    'orbax-checkpoint>=0.12.8',
    'pillow>=10.0',
    'safetensors>=0.4',  # Read/write timm's model.safetensors with numpy (no torch at run time).
    'scipy>=1.13',
    'tensorboard>=2.21.0',  # clu's metric writers need it but do not declare it.
    'tensorflow-cpu>=2.21.0; platform_machine == "x86_64"',
    'tensorflow>=2.21.0; platform_machine != "x86_64"',
    'tensorflow-datasets>=4.9.10',
    'tqdm>=4.66',
]

TESTS_REQUIRE = [
    # The import layers of docs/architecture.md, checked by `lint-imports` (.importlinter) in CI.
    'import-linter>=2.17',
    # Executes notebooks/vit_jax.ipynb in a fresh kernel (tests/test_notebook.py).
    'ipykernel>=7.0',
    'nbclient>=0.11',
    'nbformat>=5.10',
    'pytest>=9.0',
    'pytest-xdist>=3.8',
    'ruff>=0.17',
    # Interop tests against an independent implementation (CPU is enough).
    'timm>=1.0.31',
    'torch>=2.13',
    'torchvision>=0.28',
]

setuptools.setup(
    name='vit-jax',
    version='0.1.0',
    description='Vision Transformer (ViT), hybrid ResNet+ViT and MLP-Mixer in JAX/Flax.',
    license='Apache-2.0',
    license_files=['LICENSE'],  # SPDX expression (PEP 639); setuptools deprecates license classifiers.
    packages=setuptools.find_packages(include=['vit_jax', 'vit_jax.*']),
    package_data={'vit_jax': ['labels/*.txt', 'weights/timm/architectures.json']},
    python_requires='>=3.10',
    install_requires=INSTALL_REQUIRES,
    extras_require={'test': TESTS_REQUIRE},
)
