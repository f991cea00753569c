"""Building blocks of the experiment files in `configs/`: the base config and dataset presets.

Every field has a one-line comment; experiment files only change what differs.
"""

import importlib.util
import os
import types
from typing import Any, Optional, Tuple

import ml_collections
from ml_collections import config_dict

from vit_jax import families
from vit_jax import presets

# Fine-tuning presets of the official repo (a slice of train is held out as in the paper). The
# input resolution is the model's (see `with_model`), not the dataset's: small images are
# upsampled, as the official code does for CIFAR.
DATASET_PRESETS = {
    'cifar10': dict(total_steps=10_000, pp=dict(train='train[:98%]', test='test')),
    'cifar100': dict(total_steps=10_000, pp=dict(train='train[:98%]', test='test')),
    'imagenet2012': dict(total_steps=20_000, pp=dict(train='train[:99%]', test='validation')),
    'oxford_iiit_pet': dict(total_steps=500, pp=dict(train='train[:90%]', test='test')),
    'fashion_mnist': dict(total_steps=2_000, pp=dict(train='train', test='test',
                                                     train_aug='pad_flip')),
}
# A folder of images (`DIR/{train,test|val|validation}/<class>/*`): the smallest official
# schedule (Oxford-IIIT Pets, ~3.7k images); override --config.total_steps for larger folders.
FOLDER_PRESET = dict(total_steps=500, pp=dict(train='train', test='test'))


# The fields whose value is one of a fixed set, and the set: declared once, beside the defaults
# in get_config(); every place that dispatches on such a field checks it with `check_choice`.
CHOICES = {
    'trainer': ('train', 'pretrain_then_finetune', 'inference_time', 'mpp', 'mae'),
    'data_sharding': ('split', 'stream'),
    'pp.train_aug': ('inception', 'pad_flip', 'flip', 'none'),
    'optim': ('sgd', 'adamw'),
    'decay_type': ('cosine', 'linear'),
    'weight_decay_on': ('kernels', 'all'),
    'loss': ('softmax_xent', 'sigmoid_xent'),
    'distill.kind': ('hard', 'soft'),
    'param_sharding': ('replicated', 'fsdp'),
    'mpp.target': ('mean_color', 'color_4x4', 'pixels'),
}


def check_choice(field: str, value: Any) -> Any:
  """`value` when it is one of `CHOICES[field]`; else one line naming the field and its choices.

  Raises:
    ValueError: `value` is not a choice of `field` (a dotted config path, e.g. 'pp.train_aug').
  """
  if value not in CHOICES[field]:
    raise ValueError(f'Unknown {field}={value!r}; use one of {", ".join(CHOICES[field])} '
                     f'(--config.{field}=...).')
  return value


def get_config() -> ml_collections.ConfigDict:
  """Base config: official fine-tuning defaults (SGD momentum, cosine, batch 512)."""
  c = ml_collections.ConfigDict()
  # 'train', 'pretrain_then_finetune', 'inference_time', or self-supervised pretraining without
  # labels: 'mpp' (the ViT paper's masked patch prediction) or 'mae' (masked autoencoder).
  c.trainer = 'train'
  c.seed = 0  # Init, data order, augmentation and dropout all derive from it.
  c.model = None  # A model ConfigDict; see with_model().
  c.dataset = ''  # A TFDS name or a directory with {train,test}/<class>/*.jpg.
  c.tfds_data_dir = config_dict.placeholder(str)  # TFDS data_dir (None: TFDS default).
  # A folder with the dataset's files, read when its TFDS copy is not prepared: a manual
  # download, or local files a preparer reads instead of downloading (fashion_mnist: the four
  # idx .gz files; None: $FASHION_MNIST_DIR, else Debian's dataset-fashion-mnist).
  c.tfds_manual_dir = config_dict.placeholder(str)
  c.data_sharding = 'split'  # 'split': each process reads its share; 'stream': see input_pipeline.
  c.pp = ml_collections.ConfigDict()
  c.pp.train = 'train'  # Train split (TFDS slicing syntax).
  c.pp.test = 'test'  # Evaluation split; evaluated completely (last batch padded + masked).
  c.pp.val = ''  # Validation split evaluated beside test (accuracy_val), for choices; '' = none.
  c.pp.train_eval = ''  # A subset of pp.train evaluated as pp.test is (accuracy_train); '' = none.
  c.pp.crop = 384  # Input resolution (square); a multiple of the patch size.
  c.pp.train_aug = 'inception'  # 'inception' (crop 5-100% + flip), 'pad_flip', 'flip', 'none'.
  c.pp.area_min = 0.05  # Smallest crop area of the 'inception' crop (official: 5%).
  c.pp.randaug = ml_collections.ConfigDict(dict(num_layers=0, magnitude=10))  # 0 layers = off.
  c.pp.random_erase = 0.  # Random-erasing probability (a noise rectangle, Zhong et al.); 0 = off.
  # Train batches as uint8, normalised (pp.mean, pp.std) in the train step: a quarter of the
  # bytes through the pipeline and to the device; each augmented pixel is rounded to a whole
  # level first (within 0.5 / 255 of the float path). Off: float32 batches, as officially.
  c.pp.uint8_batches = False
  # Input normalisation (x / 255 - mean) / std per RGB channel; 0.5/0.5 is the official
  # x / 127.5 - 1. Left at this default, a timm checkpoint's own values (its config.json's, e.g.
  # CLIP's or ImageNet's) replace it when fine-tuning from one; any other value is kept.
  c.pp.mean = presets.OFFICIAL_MEAN
  c.pp.std = presets.OFFICIAL_STD
  c.mixup = 0.  # Mixup alpha over the global batch, in the train step; 0 = off (official).
  c.pretrained_dir = presets.DEFAULT_PRETRAINED_DIR  # Folder/bucket of <model_name>.npz.
  c.pretrained_path = ''  # Explicit .npz (local, gs:// or https://); wins over pretrained_dir.
  c.model_or_filename = ''  # AugReg file name (without .npz) instead of the model name.
  c.keep_head = False  # Keep the checkpoint's head (same classes, matched by name); official: new.
  c.total_steps = 0  # Training steps; 0 = use num_epochs.
  c.num_epochs = 0.  # Epochs over pp.train, used when total_steps is 0.
  c.optim = 'sgd'  # 'sgd' (momentum 0.9, fine-tuning) or 'adamw' (pretraining).
  c.base_lr = 0.03  # Peak learning rate after warmup.
  c.decay_type = 'cosine'  # 'cosine' (to 0) or 'linear' (to linear_end).
  c.warmup_steps = 500  # Linear warmup from 0.
  c.linear_end = 1e-5  # Final learning rate of the linear decay.
  c.grad_norm_clip = 1.  # Global-norm gradient clipping; 0 = off.
  c.optim_dtype = 'bfloat16'  # SGD momentum dtype ('bfloat16' as official, or 'float32').
  c.weight_decay = 0.  # Decoupled weight decay (adamw only; multiplied by the lr as in optax).
  # What weight_decay decays: 'kernels' (big_vision's default: not biases, norms, position
  # embeddings or the class token) or 'all' (every param).
  c.weight_decay_on = 'kernels'
  c.b1 = 0.9  # Adam beta1.
  c.b2 = 0.999  # Adam beta2.
  c.accum_steps = 8  # Gradient accumulation microbatches per step (same gradient, less memory).
  c.loss = 'softmax_xent'  # 'softmax_xent' or 'sigmoid_xent'.
  c.label_smoothing = 0.  # Label smoothing for the loss.
  # Distillation from a fixed teacher npz (vit_jax/distill.py); teacher_path '' = off.
  c.distill = ml_collections.ConfigDict()
  c.distill.teacher_path = ''  # Teacher .npz (local, gs:// or https://), e.g. a ResNet's export.
  # The teacher's preset name (e.g. 'ResNet-11_28px') or model .py; '' takes the model a
  # vit_jax run's export describes (its metadata.json), and refuses a file that does not.
  c.distill.teacher_model = ''
  c.distill.kind = 'hard'  # 'hard' (DeiT: teacher argmax as a 2nd target) or 'soft' (KL at tau).
  c.distill.alpha = 0.5  # Weight of the teacher term; 1 - alpha for the true labels (DeiT: 0.5).
  c.distill.temperature = 1.  # Soft distillation's tau (the KL term is scaled by tau^2).
  # Per-step weight average (e.g. 0.999) evaluated and exported, its decay warmed up as
  # min(decay, (1+n)/(10+n)) so it forgets the initial weights; 0 = off (raw weights exported).
  c.ema_decay = 0.
  # trainer='mpp' (ViT paper, Appendix B.1.2; docs/self_supervised.md).
  c.mpp = ml_collections.ConfigDict()
  c.mpp.corrupt = 0.5  # Fraction of patch embeddings corrupted per image (paper: 50%).
  c.mpp.mask = 0.8  # Of the corrupted: share replaced by the learned [mask] embedding (80%).
  c.mpp.random = 0.1  # ... by another patch's embedding of the same image (10%); the rest kept.
  # Target per corrupted patch: 'mean_color' (its 3-bit mean colour, 512 classes: the paper's),
  # 'color_4x4' (its 4x4 downsized version in 3-bit colours, 16 predictions) or 'pixels' (L2).
  c.mpp.target = 'mean_color'
  c.mpp.color_bits = 3  # Bits per channel of the colour targets (3: 512 colours).
  # trainer='mae' (He et al. 2022: their defaults).
  c.mae = ml_collections.ConfigDict()
  c.mae.mask_ratio = 0.75  # Fraction of patches hidden from the encoder.
  c.mae.decoder_width = 512  # Decoder token width.
  c.mae.decoder_depth = 8  # Decoder blocks.
  c.mae.decoder_heads = 16  # Decoder attention heads (MLP width 4x the token width).
  c.mae.norm_pix_loss = True  # Targets: each patch's pixels normalised by their mean and var.
  c.param_sharding = 'replicated'  # Or 'fsdp': params + optimizer state split over devices.
  c.batch = 512  # Global train batch over all devices and processes.
  c.batch_eval = 512  # Global eval batch.
  # Shuffle buffer of TFRecord-prepared TFDS data; folders and ArrayRecord data are shuffled
  # globally by index instead (constant-time resume).
  c.shuffle_buffer = 50_000
  c.prefetch = 2  # Batches kept ready on device.
  # tf.data autotuning of the train pipeline (its parallel calls and buffers). Its tuning thread
  # can hold the end of a run for up to ~60 s (tf.data waits for its sleep when the pipeline
  # is closed); off, each parallel map runs one call per core and a run exits at once: for
  # many short runs on a few cores, where the tuning gains nothing.
  c.data_autotune = True
  c.progress_every = 10  # Log (and write metrics) every so many steps.
  c.eval_every = 100  # Evaluate every so many steps (and at the end).
  c.checkpoint_every = 1_000  # Orbax checkpoint every so many steps (and at the end); 0 = end only.
  c.keep_checkpoints = 3  # Saved train states kept in workdir/train_state.
  # Few-shot linear evaluation of the frozen pre-logits during training (vit_jax/training/
  # fewshot.py): metrics fewshot/<dataset>_<k>shot, mean test accuracy over the seeds.
  c.fewshot = ml_collections.ConfigDict()
  c.fewshot.datasets = ()  # TFDS names or image folders, e.g. ('fashion_mnist',); () = off.
  c.fewshot.every = 0  # Steps between few-shot evaluations (and at the end); 0 = eval_every.
  c.fewshot.shots = (1, 5, 10, 25)  # Images per class the linear map is fitted on.
  c.fewshot.seeds = 3  # Draws of the shots (seeds 0..n-1); reported as mean ± std.
  c.fewshot.train_split = 'train'  # Split the shots and held-out images are drawn from.
  c.fewshot.test_split = 'test'  # Split the accuracy is measured on (all of it, never drawn).
  # L2 regularisers tried; each draw uses the best on its held-out images; one value = fixed.
  c.fewshot.l2_regs = tuple(2. ** i for i in range(-2, 15, 2))
  c.fewshot.holdout = 20  # Held-out training images per class (not shots) that choose the l2.
  # Continue a run directory whose record (workdir/run.json) names other data or config
  # (recorded there); off: such a rerun stops before writing anything.
  c.allow_changed_inputs = False
  return c


def with_model(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  """Sets `config.model` to preset `name` (plus the ViT, ResNet or Swin extras) and the input
  resolution to the model's official fine-tuning one (384px in whole tokens; a Swin's own)."""
  model = presets.get_config(name)
  # The family's extras at their defaults, under what the preset sets (EVA's presets set many).
  extras = families.FAMILIES[presets.family_of(model)].extras
  model.update({key: value for key, value in extras.items() if key not in model})
  config.model = model
  config.pp.crop = presets.finetune_resolution(model)
  return config


def with_dataset(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """Sets the dataset and its preset (steps, splits); a path is a folder of images."""
  config.dataset = dataset
  preset = FOLDER_PRESET if is_folder(dataset) else DATASET_PRESETS.get(dataset)
  if preset is None:
    raise ValueError(f'No preset for dataset {dataset!r}; use one of '
                     f'{", ".join(DATASET_PRESETS)} or a folder path (DIR/train/<class>/*.jpg).')
  config.total_steps = preset['total_steps']
  config.pp.update(preset['pp'])
  return config


def is_folder(dataset: str) -> bool:
  """A dataset named by a path (with a '/'), not a TFDS name."""
  return '/' in dataset or dataset.startswith('.')


def finetune_config(model: str, dataset: str, runlocal: bool = False,
                    **overrides) -> ml_collections.ConfigDict:
  """Official fine-tuning of preset `model` on `dataset`, with field overrides."""
  config = with_dataset(with_model(get_config(), model), dataset)
  config.update(overrides)
  return finish(config, runlocal)


def load_config_module(path: str) -> types.ModuleType:
  """Executes a config file (`configs/*.py`, a model file, a study grid) and returns its module.

  The one loader of config files outside `--config=` (which ml_collections' config_flags reads):
  the tools' `--model=FILE.py`, grid files and tests use it, so a file means the same everywhere.

  Raises:
    ValueError: when `path` is not a file (what to pass instead in the message).
  """
  if not os.path.isfile(path):
    raise ValueError(f'Could not find config file "{path}"; check the path.')
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def parse_arg(arg: str) -> Tuple[Tuple[str, ...], bool]:
  """'b16,cifar10,runlocal' → (('b16', 'cifar10'), True): a config file's `:ARG` parts."""
  parts = tuple(p for p in arg.split(',') if p) if arg else ()
  return tuple(p for p in parts if p != 'runlocal'), 'runlocal' in parts


def finish(config: ml_collections.ConfigDict, runlocal: bool) -> ml_collections.ConfigDict:
  """Locks `config`, shrunk first by `runlocal` (stages of a two-stage config too)."""
  if runlocal:
    for stage in [config[s] for s in ('pretrain', 'finetune') if s in config] or [config]:
      shrink(stage)
  return config.lock()


def shrink(config: ml_collections.ConfigDict) -> None:
  """The `runlocal` switch (as in big_vision): the same code paths in seconds on a CPU.

  A one-block width-16 model of the same family, patch size and token stride (MAE's decoder
  too); 2 steps of batch 8 at the input size that gives a 2x2 token grid; checkpoints, eval and
  export all run.
  """
  model = config.model
  if model is not None:  # None: the pretrained checkpoint's model (configs/hub.py), kept.
    families.FAMILIES[presets.family_of(model)].shrink(model)
    config.pp.crop = 2 * presets.token_stride(model)
  config.update(dict(total_steps=2, num_epochs=0., batch=8, batch_eval=8, accum_steps=1,
                     warmup_steps=1, shuffle_buffer=16, progress_every=1, eval_every=2,
                     checkpoint_every=2))
  if 'mae' in config:  # MAE's decoder shrinks with the encoder (8 blocks of 512 otherwise).
    config.mae.update(dict(decoder_width=16, decoder_depth=1, decoder_heads=2))


def small_vit(name: str, *, patch: int, hidden: int, layers: int, mlp: int, heads: int,
              dropout: float = 0., resnet_layers: Optional[Tuple[int, ...]] = None,
              ) -> ml_collections.ConfigDict:
  """A ViT ConfigDict outside the official presets (e.g. for 28x28 Fashion-MNIST).

  `presets.vit` plus every extra field at its default (`presets.VIT_EXTRAS`), so an experiment
  config can set them. `resnet_layers` makes it a hybrid like R+ViT-Ti_16: the official ResNet
  root (7x7 conv with stride 2, max-pool with stride 2) plus these bottleneck stages run before
  the patch embedding.
  """
  resnet = None if resnet_layers is None else (resnet_layers, 1)
  model = presets.vit(name, patch, hidden, mlp, heads, layers, dropout=dropout, resnet=resnet)
  if resnet is None:  # A plain ViT: the field exists to be overridden.
    model.resnet = None
  model.update(presets.VIT_EXTRAS)
  return model
