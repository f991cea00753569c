"""param_sharding='fsdp': same training as replicated, 1/N of the state per device, resharding."""

import os
from unittest import mock

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vit_jax.weights import resume
from vit_jax import config_lib
from vit_jax.training import parallel
from vit_jax.training import settings
from vit_jax.training import state as state_lib
from vit_jax import train
from vit_jax.weights import npz_format
from test_train import crash_at, final_params, make_config


@pytest.fixture
def shard_everything(monkeypatch):
  """The `testing` model's arrays are all below FSDP_MIN_BYTES: shard them anyway."""
  monkeypatch.setattr(parallel, 'FSDP_MIN_BYTES', 0)


def fsdp_config(**overrides):
  """`testing` widened to 16 so that 4 devices divide its dimensions (10 would not)."""
  return make_config(**{'model': dict(hidden_size=16, transformer=dict(mlp_dim=32)),
                        'optim': 'adamw', 'base_lr': 1e-2, **overrides})


def device_bytes(tree):
  """(bytes on device 0, bytes of the whole arrays)."""
  leaves = jax.tree.leaves(tree)
  return (sum(x.addressable_shards[0].data.nbytes for x in leaves),
          sum(x.nbytes for x in leaves))


def test_fsdp_rule_splits_the_largest_divisible_dimension():
  mesh = parallel.make_mesh()  # 4 devices.
  spec = lambda shape: parallel.fsdp_sharding(shape, np.float32, mesh).spec  # noqa: E731
  assert spec((768, 3, 64)) == P('data', None, None)
  assert spec((3, 64, 768)) == P(None, None, 'data')
  assert spec((1, 197, 768)) == P(None, None, 'data')  # 197 is not divisible by 4.
  assert spec((1001, 768 + 2)) == P()  # No dimension divisible by 4.
  assert spec((768,)) == P()  # Below FSDP_MIN_BYTES: a bias.
  assert parallel.fsdp_sharding((768, 64), np.float32, parallel.make_mesh(jax.devices()[:1])
                                ).spec == P()


def dict_update(config, **overrides):
  config = config.copy_and_resolve_references()
  config.update(overrides)
  return config


def trainer_and_state(config):
  trainer = state_lib.build_trainer(settings.read(config), needs_pretrained=False)
  return trainer, state_lib.init_state(trainer)


@pytest.mark.usefixtures('mock_cifar10', 'shard_everything')
def test_fsdp_trains_like_replicated():
  losses = {}
  for mode in ('replicated', 'fsdp'):
    trainer, state = trainer_and_state(fsdp_config(param_sharding=mode, total_steps=20))
    specs = {x.sharding.spec for x in jax.tree.leaves(state['opt_state'])}
    assert (specs == {P()}) == (mode == 'replicated')  # fsdp shards the moments too.
    step = train.make_train_step(trainer.model, trainer.tx, trainer.run, trainer.mesh,
                                 state_lib.state_shardings(trainer))
    rng = np.random.default_rng(0)
    batch = parallel.put_batch({  # One fixed batch: the loss falls fast, so differences grow.
        'image': rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32),
        'label': np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]}, trainer.mesh)
    losses[mode] = []
    for _ in range(20):
      state, metrics = step(state, batch)
      losses[mode].append(float(metrics['loss']))
    assert state['params']['head']['kernel'].sharding.spec == (
        P('data', None) if mode == 'fsdp' else P())  # Outputs keep the input sharding.
  assert losses['fsdp'][-1] < 0.5 * losses['fsdp'][0]  # It trains, so the comparison bites.
  np.testing.assert_allclose(losses['fsdp'], losses['replicated'], rtol=1e-5)


@pytest.mark.usefixtures('mock_cifar10')
def test_fsdp_holds_a_quarter_of_params_and_adam_state_per_device():
  """ViT-Ti/16 with adamw and the default FSDP_MIN_BYTES (only 1-D arrays stay replicated)."""
  config = config_lib.with_model(make_config(optim='adamw', pp=dict(crop=96)), 'ViT-Ti_16')
  measured = {}
  for mode in ('replicated', 'fsdp'):
    _, state = trainer_and_state(dict_update(config, param_sharding=mode))
    measured[mode] = device_bytes((state['params'], state['opt_state']))
  (rep_device, rep_total), (fsdp_device, fsdp_total) = measured['replicated'], measured['fsdp']
  assert rep_device == rep_total == fsdp_total
  assert 0.25 <= fsdp_device / rep_device < 0.26


def run_on(devices, config, workdir):
  """train_and_evaluate on a mesh of the first `devices` of the 4 CPU devices."""
  real = parallel.make_mesh
  with mock.patch.object(parallel, 'make_mesh', lambda: real(jax.devices()[:devices])):
    return train.train_and_evaluate(config, workdir)


@pytest.mark.usefixtures('mock_cifar10', 'shard_everything')
@pytest.mark.parametrize('resumed_as', ['fsdp', 'replicated'])
def test_checkpoint_written_on_4_devices_resumes_on_2(tmp_path, resumed_as):
  # SGD: Adam would turn the float noise of gradients that are ~0 in theory (the attention key
  # bias) into full-size steps of either sign, hiding real differences.
  config = fsdp_config(total_steps=6, checkpoint_every=2, eval_every=0, param_sharding='fsdp',
                       optim='sgd', base_lr=0.1)
  straight = str(tmp_path / 'straight')
  train.train_and_evaluate(config, straight)
  workdir = str(tmp_path / 'moved')
  with crash_at(5), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'train_state'))) == ['2', '4']
  resumed = dict_update(config, param_sharding=resumed_as)
  real = parallel.make_mesh
  with mock.patch.object(parallel, 'make_mesh', lambda: real(jax.devices()[:2])):
    trainer = state_lib.build_trainer(settings.read(resumed), needs_pretrained=False)
    manager = resume.make_checkpoint_manager(workdir, resumed.keep_checkpoints)
    state, damaged = resume.restore_or_init(manager, lambda: state_lib.abstract_state(trainer),
                                            lambda: state_lib.init_state(trainer))
    manager.close()
  kernel = state['params']['head']['kernel']
  assert not damaged and int(state['step']) == 4 and kernel.sharding.mesh.devices.size == 2
  assert kernel.sharding.spec == (P('data', None) if resumed_as == 'fsdp' else P())
  assert run_on(2, resumed, workdir)['step'] == 6
  ours, theirs = (npz_format.flatten(final_params(d)) for d in (workdir, straight))
  for key in theirs:  # Another device count sums in another order: float noise only.
    np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.slow
def test_two_processes_fsdp_checkpoint_and_export(tmp_path):
  """Sharded over processes: orbax saves each process's shards; the export gathers them."""
  from test_distributed import CONFIG_FILE, finish, launch, launch_pair, write_image_dataset
  dataset = write_image_dataset(str(tmp_path / 'data'))
  config_path = tmp_path / 'config.py'
  # Width 64: the patch embedding (196 KiB) and MLP kernels (64 KiB) reach FSDP_MIN_BYTES.
  config_path.write_text(CONFIG_FILE.format(dataset=dataset, steps=4).replace(
      "  return config.lock()",
      "  config.param_sharding = 'fsdp'\n"
      "  config.model.update(dict(hidden_size=64, transformer=dict(mlp_dim=256)))\n"
      "  return config.lock()"))
  single_dir, multi_dir = str(tmp_path / 'single'), str(tmp_path / 'multi')
  outputs = finish(launch_pair(config_path, multi_dir))
  written = sorted(os.listdir(os.path.join(multi_dir, 'train_state')))
  assert written == ['2', '4'], outputs[0][-2000:]
  finish([launch(config_path, single_dir, devices=4)])
  multi = npz_format.flatten(final_params(multi_dir))
  for key, value in npz_format.flatten(final_params(single_dir)).items():
    np.testing.assert_allclose(multi[key], value, atol=1e-5, err_msg=key)
