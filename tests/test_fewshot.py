"""Few-shot linear evaluation: the closed form, the draws, the features, training and the tool."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings
from vit_jax import models
from vit_jax.training import fewshot
from vit_jax.training import least_squares
from vit_jax.training import parallel


def clusters(rng, num_classes, per_class, dim, spread):
  """Features around one random centre per class, labels in class blocks."""
  centres = rng.normal(0, 1, (num_classes, dim))
  labels = np.repeat(np.arange(num_classes), per_class)
  return centres[labels] + spread * rng.normal(0, 1, (len(labels), dim)), labels


@pytest.mark.parametrize('n,dim', [(40, 6), (12, 30)])  # Primal (N > D) and dual (N < D).
def test_closed_form_equals_a_direct_solve(np_rng, n, dim):
  x = np_rng.normal(0, 1, (n, dim)) * np_rng.uniform(0.1, 5, dim) + np_rng.normal(0, 3, dim)
  labels = np_rng.integers(0, 4, n)
  solve = least_squares.least_squares_solver(x, labels, 4)
  for l2 in (0.25, 16., 1024.):
    weights, mean, std = solve(l2)
    np.testing.assert_allclose(mean[0], x.mean(0))
    np.testing.assert_allclose(std[0], x.std(0) + least_squares.STD_EPSILON)
    a = np.concatenate([(x - x.mean(0)) / (x.std(0) + 1e-5), np.full((n, 1), 100.)], axis=1)
    y = np.where(labels[:, None] == np.arange(4)[None], 1., -1.)
    direct = np.linalg.solve(a.T @ a + l2 * np.eye(dim + 1), a.T @ y)
    np.testing.assert_allclose(weights, direct, rtol=1e-6, atol=1e-9)


def test_shot_draws_are_fixed_per_seed_nested_and_apart_from_the_held_out(np_rng):
  labels = np_rng.integers(0, 5, 400)
  fit, held = least_squares.draw_shots(labels, 5, 3, seed=1, holdout=4)
  again, held_again = least_squares.draw_shots(labels, 5, 3, seed=1, holdout=4)
  np.testing.assert_array_equal(fit, again)
  np.testing.assert_array_equal(held, held_again)
  assert np.bincount(labels[fit], minlength=5).tolist() == [3] * 5
  assert np.bincount(labels[held], minlength=5).tolist() == [4] * 5
  assert not set(fit) & set(held)
  one, _ = least_squares.draw_shots(labels, 5, 1, seed=1, holdout=4)
  assert set(one) <= set(fit)  # The 1 shot of a seed is one of its 3 shots.
  other, _ = least_squares.draw_shots(labels, 5, 3, seed=2, holdout=4)
  assert set(other) != set(fit)


def test_too_few_images_for_the_shots_is_one_line():
  with pytest.raises(ValueError, match='class 1 has 2 images .* fewer than 3 shots'):
    least_squares.draw_shots(np.array([0, 0, 0, 1, 1]), 2, 3, seed=0, holdout=0)


def test_separable_classes_score_near_100_and_random_labels_near_chance(np_rng):
  x, labels = clusters(np_rng, 10, 60, 32, spread=0.05)
  train = least_squares.Features(x[::2], labels[::2])
  test = least_squares.Features(x[1::2], labels[1::2])
  results = least_squares.evaluate_features(train, test, 10, (1, 5), 3, (1., 1024.), holdout=5)
  assert [r.shots for r in results] == [1, 5]
  assert all(r.mean > 0.99 for r in results)
  shuffled = least_squares.Features(train.x, np_rng.permutation(train.labels))
  shuffled_test = least_squares.Features(test.x, np_rng.permutation(test.labels))
  chance = least_squares.evaluate_features(shuffled, shuffled_test, 10, (10,), 3, (1., 1024.),
                                           holdout=5)[0]
  assert abs(chance.mean - 0.1) < 0.06


def test_the_regulariser_is_chosen_without_the_test_split(np_rng):
  x, labels = clusters(np_rng, 4, 50, 16, spread=1.5)
  train = least_squares.Features(x[::2], labels[::2])
  test = least_squares.Features(x[1::2], labels[1::2])
  grid = tuple(2. ** i for i in range(-4, 15, 2))
  first = least_squares.evaluate_features(train, test, 4, (5,), 3, grid, holdout=10)[0]
  flipped = least_squares.Features(test.x, (test.labels + 1) % 4)  # Any other test set.
  second = least_squares.evaluate_features(train, flipped, 4, (5,), 3, grid, holdout=10)[0]
  assert first.l2_regs == second.l2_regs
  assert second.mean < first.mean
  fixed = least_squares.evaluate_features(train, test, 4, (5,), 3, (7.,), holdout=0)[0]
  assert fixed.l2_regs == (7.,) * 3


def test_rows_are_put_back_in_the_split_order_for_several_processes():
  # 2 processes, local batch 2, 3 batches; 11 examples: shares 6 + 5, the last row padding (-1).
  contiguous = [[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, -1]]
  batches = [np.array(contiguous[0][b] + contiguous[1][b]) for b in range(3)]
  np.testing.assert_array_equal(fewshot.in_split_order(batches, (6, 5), False), np.arange(11))
  strided = [[0, 2], [4, 6], [8, 10]], [[1, 3], [5, 7], [9, -1]]  # Image folders' shares.
  batches = [np.array(strided[0][b] + strided[1][b]) for b in range(3)]
  np.testing.assert_array_equal(fewshot.in_split_order(batches, (6, 5), True), np.arange(11))
  one = [np.array([0, 1, 2]), np.array([3, -1, -1])]
  np.testing.assert_array_equal(fewshot.in_split_order(one, (4,), False), np.arange(4))


def folder_config(dataset, **overrides):
  """The `testing` ViT at 32px (2x2 tokens) on a tiny image folder, few-shot on the same one."""
  config = config_lib.with_model(config_lib.get_config(), 'testing')
  config.model.transformer.dropout_rate = 0.
  config.dataset = dataset
  config.pp.update(dict(train='train', test='test', crop=32, train_aug='none'))
  config.update(dict(
      pretrained_dir='', total_steps=4, batch=4, batch_eval=8, accum_steps=1, warmup_steps=1,
      base_lr=0.1, optim_dtype='float32', shuffle_buffer=16, progress_every=2, eval_every=2,
      checkpoint_every=2, prefetch=1))
  config.fewshot.update(dict(datasets=(dataset,), shots=(1, 3), seeds=2, holdout=2,
                             l2_regs=(1., 64.)))
  config.update(overrides)
  return config


@pytest.fixture
def image_folder(tmp_path):
  from test_distributed import write_image_dataset  # Tiny PNG folders, 3 classes.
  return write_image_dataset(str(tmp_path / 'data'), train_per_class=6, test_per_class=3)


def random_params(model, crop=32, seed=3):
  params = model.init(jax.random.key(seed), jnp.zeros((1, crop, crop, 3)), train=False)['params']
  leaves, tree = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(tree, [x + 0.2 * rng.standard_normal(x.shape).astype(np.float32)
                                   for x in leaves])


def test_features_are_the_same_on_1_and_4_devices_and_in_the_split_order(image_folder):
  assert jax.device_count() == 4  # tests/conftest.py
  config = folder_config(image_folder)
  model = models.get_model(config.model, num_classes=3)
  params = random_params(model)
  # 9 images: 2 batches of 8, 7 padding.
  data = input_pipeline.get_eval_data(settings.data(config), 'test')
  got = {}
  for devices in (1, 4):
    mesh = parallel.make_mesh(jax.devices()[:devices])
    represent = fewshot.make_representation_fn(model, mesh)
    got[devices] = fewshot.extract(represent, params, data, mesh)
    got[devices, 'results'] = fewshot.run_dataset(settings.fewshot(config), settings.data(config),
                                                  image_folder, represent, params, mesh).results
  images = np.concatenate([b['image'][b['mask'] > 0] for b in data.batches()])
  labels = np.concatenate([b['label'][b['mask'] > 0].argmax(-1) for b in data.batches()])
  direct = model.clone(num_classes=0).apply({'params': params}, images, train=False)
  assert direct.shape == (9, 10)  # Every test image once, the class token's 10 features.
  for devices in (1, 4):
    np.testing.assert_allclose(got[devices].x, direct, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[devices].labels, labels)
  assert sorted(labels.tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
  assert got[1, 'results'] == got[4, 'results']


def fewshot_lines(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    lines = [json.loads(line) for line in f]
  return [line for line in lines if any(k.startswith('fewshot/') for k in line)]


STRAIGHT = dict(total_steps=4, eval_every=2, checkpoint_every=2)


@pytest.fixture(scope='module')
def straight_run(tmp_path_factory):
  """(image folder, run directory) of one 4-step run with few-shot at steps 2 and 4: the logged
  numbers two tests check (a resumed run's, and the tool's on the run directory)."""
  from test_distributed import write_image_dataset
  from vit_jax import train
  root = tmp_path_factory.mktemp('fewshot')
  folder = write_image_dataset(str(root / 'data'), train_per_class=6, test_per_class=3)
  train.train_and_evaluate(folder_config(folder, **STRAIGHT), str(root / 'straight'))
  return folder, str(root / 'straight')


def test_training_logs_fewshot_metrics_and_a_resumed_run_logs_the_same(tmp_path, straight_run):
  from test_train import crash_at  # Kills the run before a given step.
  image_folder, straight = straight_run
  config = folder_config(image_folder, **STRAIGHT)
  train_lib = __import__('vit_jax.train', fromlist=['train'])
  logged = fewshot_lines(straight)
  name = os.path.basename(image_folder)
  assert [line['step'] for line in logged] == [2, 4]
  assert set(logged[0]) == {'step', f'fewshot/{name}_1shot', f'fewshot/{name}_3shot'}
  assert all(0 <= v <= 1 for line in logged for k, v in line.items() if k != 'step')
  killed = str(tmp_path / 'killed')
  with crash_at(3), pytest.raises(KeyboardInterrupt):
    train_lib.train_and_evaluate(config, killed)
  train_lib.train_and_evaluate(config, killed)  # Resumes at step 2.
  assert fewshot_lines(killed) == logged
  events = [f for f in os.listdir(straight) if f.startswith('events.out.tfevents')]
  assert events and b'fewshot/' in open(os.path.join(straight, events[0]), 'rb').read()


def test_tool_on_a_run_directory_gives_the_number_training_logged(straight_run, capsys):
  image_folder, workdir = straight_run  # Its last few-shot numbers are the exported params'.
  logged = fewshot_lines(workdir)[-1]
  args = [f'--checkpoint={workdir}', f'--dataset={image_folder}', '--json', *TOOL_ARGS]
  rc, out, err = call_tool(args, capsys)
  assert rc == 0, err
  doc = json.loads(out)
  assert (doc['image_size'], doc['feature_dim'], doc['random_init_seed']) == (32, 10, None)
  name = os.path.basename(image_folder)
  assert [r['mean'] for r in doc['results']] == pytest.approx(
      [logged[f'fewshot/{name}_1shot'], logged[f'fewshot/{name}_3shot']])
  rc, out, err = call_tool([*args, '--random_init_seed=0'], capsys)
  assert rc == 0, err
  assert json.loads(out)['random_init_seed'] == 0


def test_fewshot_is_off_by_default():
  assert config_lib.get_config().fewshot.datasets == ()
  assert fewshot.make_hook(settings.fewshot(config_lib.get_config()), None, None, None) is None


def test_shots_drawn_from_the_test_split_are_an_error_before_training(image_folder):
  config = folder_config(image_folder)
  config.fewshot.train_split = 'train+test'
  model = models.get_model(config.model, num_classes=3)
  with pytest.raises(ValueError, match='share 9 images: shots would be drawn from the test'):
    fewshot.make_hook(settings.fewshot(config), settings.data(config), model, parallel.make_mesh())


def call_tool(args, capsys):
  from vit_jax.tools import cli
  from vit_jax.tools import fewshot as tool
  rc = cli.call(tool, ['fewshot', *args])
  out, err = capsys.readouterr()
  return rc, out, err


TOOL_ARGS = ('--shots=1,3', '--seeds=2', '--holdout=2', '--l2_regs=1,64', '--batch_size=8')


def test_tool_on_a_published_npz_prints_a_table_and_json(tmp_path, image_folder, capsys):
  from npz_fixtures import published_vit, write_npz
  arrays, _ = published_vit(hidden=12, mlp=16, heads=2, layers=1, patch=8, num_tokens=1 + 4,
                            num_classes=7, representation_size=6)
  npz = write_npz(tmp_path / 'vit.npz', arrays)  # 16px: a 2x2 grid of 8px patches.
  rc, out, err = call_tool([f'--checkpoint={npz}', f'--dataset={image_folder}', *TOOL_ARGS],
                           capsys)
  assert rc == 0, err
  assert 'shots from train (18 images), tested on all 9 of test; 6-d features at 16px' in out
  assert 'l2 chosen per seed from 2 values on held-out training images (not shots; at most 2 a ' \
      'class' in out
  rows = [line.split() for line in out.splitlines() if line.split()[:1] in (['1'], ['3'])]
  assert [r[0] for r in rows] == ['1', '3']
  assert all(' '.join(r).endswith('(on 2 held-out a class)') for r in rows), out
  rc, out, err = call_tool([f'--checkpoint={npz}', f'--dataset={image_folder}', '--json',
                            '--l2_regs=8', *TOOL_ARGS[:3]], capsys)
  assert rc == 0, err
  doc = json.loads(out)
  assert (doc['feature_dim'], doc['num_train'], doc['num_test']) == (6, 18, 9)
  assert [r['shots'] for r in doc['results']] == [1, 3]
  assert all(r['l2_regs'] == [8., 8.] and len(r['accuracies']) == 2 for r in doc['results'])


@pytest.mark.parametrize('args,message', [
    ([], 'Pass --checkpoint=PATH_OR_NAME'),
    (['--checkpoint=nope.npz', '--dataset=fashion_mnist'], 'Could not find checkpoint'),
    (['--shots=1,x'], r'--shots=1,x must be a list of positive ints'),
    (['--l2_regs=0'], r'--l2_regs=0 must be a list of positive floats'),
    (['--batch_size=6'], 'batch_size=6 is not divisible by 4 devices'),
    (['--test_split=train', '--train_split=train'], 'shots would be drawn from the test split'),
])
def test_tool_bad_input_is_one_line(tmp_path, image_folder, capsys, args, message):
  from npz_fixtures import published_vit, write_npz
  arrays, _ = published_vit(hidden=12, mlp=16, heads=2, layers=1, patch=8, num_tokens=1 + 4,
                            num_classes=7)
  npz = write_npz(tmp_path / 'vit.npz', arrays)
  base = [] if not args else [f'--checkpoint={npz}', f'--dataset={image_folder}']
  rc, out, err = call_tool([*base, *args], capsys)
  assert rc == 1 and out == ''
  assert err.count('\n') == 1 and err.startswith('fewshot: error: '), err
  assert re.search(message, err), err


@pytest.mark.parametrize('family', ['augreg', 'mae_pooled', 'siglip', 'deit_distilled'])
def test_features_are_timms_pre_logits(family, tmp_path):
  """Class token, GAP + fc_norm, MAP and DeiT's two tokens (averaged): what the heads see."""
  torch = pytest.importorskip('torch')
  from test_timm_hub import FAMILIES, save_hub_folder, timm_model
  from vit_jax.weights import loading
  net = timm_model(family)
  loaded = loading.load_model(save_hub_folder(net, tmp_path / 'hub'))
  size = 2 * FAMILIES[family][2]
  x = np.random.default_rng(2).uniform(-1, 1, (3, size, size, 3)).astype(np.float32)
  mean, std = np.asarray(net.pretrained_cfg['mean']), np.asarray(net.pretrained_cfg['std'])
  x_timm = (((x + 1) / 2 - mean) / std).astype(np.float32).transpose(0, 3, 1, 2)
  with torch.no_grad():
    want = net.forward_head(net.forward_features(torch.from_numpy(x_timm)), pre_logits=True)
  mesh = parallel.make_mesh()
  represent = fewshot.make_representation_fn(loaded.model, mesh)
  x_ours = (((x + 1) / 2 - np.asarray(loaded.mean)) / np.asarray(loaded.std)).astype(np.float32)
  batch = {'image': np.concatenate([x_ours, x_ours[:1]]), 'label': np.zeros(4, np.int32),
           'mask': np.ones(4, np.float32)}
  got = parallel.to_host(represent(loaded.params, parallel.put_batch(batch, mesh)))[0][:3]
  np.testing.assert_allclose(got, want.numpy(), atol=2e-4)


@pytest.mark.parametrize('kind', ['vit', 'swin'])
def test_tool_on_a_timm_hub_folder(kind, tmp_path, image_folder, capsys):
  torch = pytest.importorskip('torch')
  timm = pytest.importorskip('timm')
  from test_timm_hub import save_hub_folder, timm_model
  if kind == 'vit':
    net = timm_model('augreg')
  else:
    from test_swin import TINY
    torch.manual_seed(0)
    net = timm.create_model('swin_tiny_patch4_window7_224', pretrained=False,
                            **dict(TINY, img_size=32, num_classes=5)).eval()
  folder = save_hub_folder(net, tmp_path / 'hub')
  rc, out, err = call_tool([f'--checkpoint={folder}', f'--dataset={image_folder}', '--json',
                            *TOOL_ARGS], capsys)
  assert rc == 0, err
  doc = json.loads(out)
  assert (doc['image_size'], doc['num_test']) == (32, 9)
  assert doc['feature_dim'] == net.num_features


def test_an_unpooled_model_is_a_one_line_error():
  model = models.get_model('testing-unpooled', num_classes=3)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  mesh = parallel.make_mesh(jax.devices()[:1])
  batch = {'image': np.zeros((2, 32, 32, 3), np.float32), 'label': np.zeros(2, np.int32),
           'mask': np.ones(2, np.float32)}
  with pytest.raises(ValueError, match=r'gives \(4, 10\) features per image, not one vector'):
    fewshot.make_representation_fn(model, mesh)(params, parallel.put_batch(batch, mesh))


@pytest.mark.slow
def test_two_processes_log_the_numbers_of_one(tmp_path):
  """2 processes x 2 devices (each reads its share of both splits) = 1 process x 4 devices."""
  from test_distributed import CONFIG_FILE, finish, launch, launch_pair, write_image_dataset
  dataset = write_image_dataset(str(tmp_path / 'data'))  # 24 train, 9 test: shares 12+12, 5+4.
  config = CONFIG_FILE.format(dataset=dataset, steps=2).replace(
      '  return config.lock()',
      '  config.fewshot.update(dict(datasets=(config.dataset,), every=2, shots=(1, 4), seeds=2,\n'
      '                             holdout=2, l2_regs=(1., 64.)))\n  return config.lock()')
  (tmp_path / 'config.py').write_text(config)
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  finish(launch_pair(tmp_path / 'config.py', multi))
  finish([launch(tmp_path / 'config.py', single, devices=4)])
  logged = fewshot_lines(single)
  assert [line['step'] for line in logged] == [2] and len(logged[0]) == 3
  assert fewshot_lines(multi) == logged


@pytest.mark.parametrize('fewshot_settings,message', [
    (dict(shots=(1, 8)), r"few-shot on \S+: every class of train has fewer images than the 8 "
                         r"shots of --config\.fewshot\.shots=1,8: 'class0' 6, 'class1' 6, "
                         r"'class2' 6; use --config\.fewshot\.shots=1"),
    (dict(shots=(1, 6)), r'no held-out training image .* at 6 shots .*every class of train has '
                         r'6 images.*--config\.fewshot\.l2_regs=1024'),
    (dict(datasets=('ONE',)), r"few-shot on \S+: it has 1 class \('class0'\).*at least 2"),
])
def test_fewshot_needs_are_refused_before_step_1(tmp_path, image_folder, fewshot_settings,
                                                 message):
  """Issue 62.5: 6 images a class and 8 shots trained to the first few-shot evaluation, then
  exited 1 without the checkpoint due at that step (issue 62.4: one class scored 100%)."""
  from test_distributed import write_image_dataset
  from vit_jax import train
  from vit_jax.weights import store
  config = folder_config(image_folder, **STRAIGHT)
  one_class = write_image_dataset(str(tmp_path / 'one'), classes=1, train_per_class=30)
  config.fewshot.update({k: tuple(one_class if d == 'ONE' else d for d in v)
                         if k == 'datasets' else v for k, v in fewshot_settings.items()})
  workdir = str(tmp_path / 'run')
  with pytest.raises(ValueError, match=message) as error:
    train.train_and_evaluate(config, workdir)
  assert '\n' not in str(error.value)
  assert not store.has_saved_state(workdir)
  assert not os.path.exists(os.path.join(workdir, 'metrics.jsonl'))


def test_a_failed_fewshot_evaluation_keeps_the_checkpoint_of_its_step(tmp_path, image_folder):
  """Issue 62.5: the checkpoint of a step is saved before its evaluations run."""
  from unittest import mock
  from vit_jax import train
  config = folder_config(image_folder, total_steps=4, eval_every=0, checkpoint_every=2)
  config.fewshot.every = 2
  workdir = str(tmp_path / 'run')
  with mock.patch.object(fewshot, 'run_dataset', side_effect=RuntimeError('evaluation failed')), \
       pytest.raises(RuntimeError, match='evaluation failed'):
    train.train_and_evaluate(config, workdir)
  assert os.listdir(os.path.join(workdir, 'train_state')) == ['2']


def test_tool_messages_name_its_own_flags_and_the_classes(tmp_path, image_folder, capsys):
  """Issue 62: the tool's errors named --config.fewshot.* flags and 'class 0'; its header said
  20 held-out images a class where 6 - 3 = 3 were left."""
  from npz_fixtures import published_vit, write_npz
  from test_distributed import write_image_dataset
  arrays, _ = published_vit(hidden=12, mlp=16, heads=2, layers=1, patch=8, num_tokens=1 + 4,
                            num_classes=7)
  npz = write_npz(tmp_path / 'vit.npz', arrays)
  base = [f'--checkpoint={npz}', f'--dataset={image_folder}', '--seeds=1', '--batch_size=8']
  for args, message in (
      (['--shots=1,7'], r"'class0' 6, 'class1' 6, 'class2' 6; use --shots=1 "),
      (['--shots=6', '--l2_regs=1,64'], r'--l2_regs=1024'),
      (['--shots=1', f'--dataset={write_image_dataset(str(tmp_path / "one"), classes=1)}'],
       r"1 class \('class0'\)")):
    rc, out, err = call_tool([*base, *args], capsys)
    assert rc == 1 and err.count('\n') == 1, err
    assert re.search(message, err) and '--config' not in err, err
  rc, out, err = call_tool([*base, '--shots=1,3', '--holdout=20', '--l2_regs=1,64'], capsys)
  assert rc == 0, err
  assert '20 held-out' not in out
  rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (['1'], ['3'])}
  assert '5 held-out' in rows['1'] and '3 held-out' in rows['3'], out


def test_a_later_stages_fewshot_needs_are_checked_before_stage_1(tmp_path, image_folder):
  """Issue 62.5: stage 2's few-shot evaluation refused only after stage 1 had trained."""
  import ml_collections
  from vit_jax import train
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'
  config.pretrain = folder_config(image_folder, **STRAIGHT)
  config.pretrain.fewshot.datasets = ()
  config.finetune = folder_config(image_folder, **STRAIGHT)
  config.finetune.fewshot.shots = (1, 8)
  with pytest.raises(ValueError, match=r'fewer images than the 8 shots of '
                                       r'--config\.finetune\.fewshot\.shots=1,8'):
    train.check_inputs(config, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run')
