"""Convolutional models of the papers this suite compares (flax), as
`Problem`s with their FLOPs per sample.

    problem = get_problem('cnn', input_dim=784)        # McMahan et al.'s CNN
    problem = get_problem('lasg_cnn', input_dim=784)   # the LASG code's CNN

A sample arrives flat ([N, D], as every dataset kind loads it) and is
reshaped to an image by its feature count: 784 = 28x28x1 (MNIST,
Fashion-MNIST), 3072 = 32x32x3 (CIFAR-10, channels last). Any other D is
refused naming the model, D and the shapes it knows (`image_shape`).

  cnn        McMahan et al. 2017 (Sec. 3): 5x5 conv 32 -> 2x2 max pool ->
             5x5 conv 64 -> 2x2 max pool -> 512 ReLU -> softmax ('SAME'
             convolutions, ReLU: 1,663,370 parameters on 28x28x1, the
             paper's count).
  lasg_cnn   The LASG authors' code (sunyuejiao/lasg, mnist.py `Net`): 5x5
             conv 20 -> 2x2 max pool -> 5x5 conv 50 -> 2x2 max pool -> 500
             -> 10, 'VALID' convolutions, ELU (431,080 parameters on
             28x28x1).

FLOPs count multiply-adds twice, the convolutions' and dense layers' only
(pooling and activations are memory-bound and left out, as the MLP's
count leaves out its ReLU): a sample's loss is the forward pass F; its
gradient F (forward) + F (weights' gradients) + F minus the first layer's
share (the inputs' gradients, not needed for the first layer).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp

IMAGE_SHAPES = {784: (28, 28, 1), 3072: (32, 32, 3)}


def image_shape(model: str, input_dim: int) -> tuple[int, int, int]:
  """(H, W, C) of a flat sample of `input_dim` features, or ValueError
  naming the model, the feature count and the shapes it takes."""
  if input_dim not in IMAGE_SHAPES:
    known = ', '.join(f'{d} = {"x".join(map(str, s))}'
                      for d, s in IMAGE_SHAPES.items())
    raise ValueError(
        f'model={model!r} takes images ({known} features per sample, '
        f'height x width x channels); these data have {input_dim} features '
        'per sample: use a dataset of images (mnist, fashion_mnist, '
        'cifar10) or a model for vectors (logreg, mlp)')
  return IMAGE_SHAPES[input_dim]


class FedAvgCNN(nn.Module):
  """McMahan et al. 2017's MNIST CNN."""
  num_classes: int = 10
  shape: tuple[int, int, int] = (28, 28, 1)

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0],) + tuple(self.shape))
    x = nn.relu(nn.Conv(32, (5, 5), padding='SAME', name='conv1')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(64, (5, 5), padding='SAME', name='conv2')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(512, name='fc')(x))
    return nn.Dense(self.num_classes, name='out')(x)


class LasgCNN(nn.Module):
  """The LASG authors' CNN (ELU, 'VALID' convolutions)."""
  num_classes: int = 10
  shape: tuple[int, int, int] = (28, 28, 1)

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0],) + tuple(self.shape))
    x = nn.elu(nn.Conv(20, (5, 5), padding='VALID', name='conv1')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.elu(nn.Conv(50, (5, 5), padding='VALID', name='conv2')(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.elu(nn.Dense(500, name='fc')(x))
    return nn.Dense(self.num_classes, name='out')(x)


def layer_flops(shape, layers) -> list[float]:
  """Forward FLOPs (2 x multiply-adds) of each conv / dense layer.

  Args:
    shape: (H, W, C) of the input.
    layers: ('conv', out_channels, kernel, padding) | ('pool',) |
      ('dense', units), in order.
  """
  h, w, c = shape
  out = []
  for layer in layers:
    if layer[0] == 'conv':
      _, cout, k, padding = layer
      if padding == 'VALID':
        h, w = h - k + 1, w - k + 1
      out.append(2.0 * h * w * k * k * c * cout)
      c = cout
    elif layer[0] == 'pool':
      h, w = h // 2, w // 2
    else:
      units = layer[1]
      out.append(2.0 * h * w * c * units)
      h, w, c = 1, 1, units
  return out


def _flops(shape, layers) -> tuple[float, float]:
  """(gradient, loss) FLOPs per sample from `layer_flops`."""
  forward = layer_flops(shape, layers)
  total = sum(forward)
  return 3 * total - forward[0], total


CNN_LAYERS = (('conv', 32, 5, 'SAME'), ('pool',), ('conv', 64, 5, 'SAME'),
              ('pool',), ('dense', 512), ('dense', None))
LASG_CNN_LAYERS = (('conv', 20, 5, 'VALID'), ('pool',),
                   ('conv', 50, 5, 'VALID'), ('pool',), ('dense', 500),
                   ('dense', None))


def _problem(name, module_cls, layers, input_dim, num_classes):
  from laq_jax import problems  # pylint: disable=g-import-not-at-top
  shape = image_shape(name, input_dim)
  module = module_cls(num_classes=num_classes, shape=shape)

  def init(key):
    return module.init(key, jnp.zeros((1, input_dim)))['params']

  def apply(params, x):
    return module.apply({'params': params}, x)

  grad, loss = _flops(shape, [l if l[1:] != (None,) else ('dense',
                                                           num_classes)
                              for l in layers])
  return problems.Problem(name, init, apply, num_classes,
                          grad_flops_per_sample=grad,
                          loss_flops_per_sample=loss)


@functools.cache
def cnn(input_dim: int = 784, num_classes: int = 10):
  """McMahan et al. 2017's CNN (`FedAvgCNN`)."""
  return _problem('cnn', FedAvgCNN, CNN_LAYERS, input_dim, num_classes)


@functools.cache
def lasg_cnn(input_dim: int = 784, num_classes: int = 10):
  """The LASG code's CNN (`LasgCNN`)."""
  return _problem('lasg_cnn', LasgCNN, LASG_CNN_LAYERS, input_dim,
                  num_classes)

