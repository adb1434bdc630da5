"""Named parts a user can add from their own code: one class for all.

    from laq_jax import compressors
    # my_sign(grad_P, ref_P, key, hyper) -> compressors.Compressed
    compressors.REGISTRY.register('my_sign', my_sign)

Compressors (`compressors.REGISTRY`), triggers (`trigger.REGISTRY`), problems
(`problems.REGISTRY`), datasets (`laq_jax.data.REGISTRY`) and algorithm
presets (`hyper.ALGORITHMS`, `hyper.register_algorithm`) are each one
`Registry`. Where a `Hyper` field picks a part at run time (the compressor,
the trigger) it holds the part's index here, so registration only appends:
the built-in parts keep their indices, and a part registered later is
compiled into a program only when its `RunSpec` (or a sweep's points) names
it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar
import weakref

from laq_jax.show import show

T = TypeVar('T')

# Every Registry made, and the other process-global tables registration
# writes (`hyper.ALGORITHMS`), for `scoped`.
_REGISTRIES: 'weakref.WeakSet[Registry]' = weakref.WeakSet()
_TABLES: list[dict] = []


def track(table: dict) -> dict:
  """Puts a name -> value table other than a Registry (the presets,
  `hyper.ALGORITHMS`) under `scoped`; returns it."""
  _TABLES.append(table)
  return table


@contextlib.contextmanager
def scoped():
  """Every registration made inside (compressors, triggers, servers,
  clients, models, dataset kinds, presets: `register`, `replace=True`,
  `register_algorithm`) is undone on exit, whatever raised::

      with laq_jax.registry.scoped():
        compressors.REGISTRY.register('mine', my_compressor)
        ...  # runs, sweeps
      # 'mine' is gone; a replaced part is the library's again

  For tests and notebooks that try a part without leaving it registered
  for what runs next in the process. Programs compiled inside stay cached
  on the part objects they ran (a RunSpec holds its parts), never on names.
  """
  saved = ([(r._parts, dict(r._parts)) for r in list(_REGISTRIES)]  # pylint: disable=protected-access
           + [(t, dict(t)) for t in _TABLES])
  try:
    yield
  finally:
    for table, content in saved:
      table.clear()
      table.update(content)


def names_attribute(module: str, **registries: 'Registry') -> Callable[
    [str], Any]:
  """A module `__getattr__` serving each registry's names under the given
  attribute (`COMPRESSORS=REGISTRY`), as they are now: a part registered
  later is in them."""
  def __getattr__(name):
    if name in registries:
      return registries[name].names
    raise AttributeError(f'module {show(module)} has no attribute {show(name)}')
  return __getattr__


class Registry(Generic[T]):
  """An ordered name -> part table with one-line errors.

  Attributes:
    kind: what the parts are ('compressor', 'trigger', ...), for messages.
  """

  def __init__(self, kind: str, parts: Iterable[tuple[str, T]] = ()):
    self.kind = kind
    self._parts: dict[str, T] = {}
    _REGISTRIES.add(self)
    for name, part in parts:
      self.register(name, part)

  @property
  def names(self) -> tuple[str, ...]:
    """Every registered name, in registration order."""
    return tuple(self._parts)

  def __contains__(self, name) -> bool:
    return isinstance(name, str) and name in self._parts

  def __iter__(self) -> Iterator[str]:
    return iter(self._parts)

  def __len__(self) -> int:
    return len(self._parts)

  def _unknown(self, name) -> ValueError:
    return ValueError(f'unknown {self.kind} {show(name)}; allowed: '
                      f'{", ".join(self._parts)}')

  def get(self, name: str) -> T:
    """The part called `name`, or a ValueError listing the allowed ones."""
    if name not in self:
      raise self._unknown(name)
    return self._parts[name]

  def index(self, name: str) -> int:
    """The position of `name` (what a Hyper field holds)."""
    if name not in self:
      raise self._unknown(name)
    return self.names.index(name)

  def name_allowed(self, name) -> bool:
    """Whether `name` may be registered: letters, digits and _."""
    return isinstance(name, str) and name.replace('_', 'a').isalnum()

  def register(self, name: str, part: T, *, replace: bool = False) -> T:
    """Adds `part` as `name` (at the end) and returns it.

    Raises:
      ValueError: `name` is not an identifier-like string, or is taken
        (pass replace=True to swap the part, keeping its index).
    """
    if not self.name_allowed(name):
      raise ValueError(f'{self.kind} name {show(name)} is not allowed: use '
                       'letters, digits and _')
    if name in self._parts and not replace:
      raise ValueError(f'{self.kind} {show(name)} is already registered; pass '
                       'replace=True to replace it')
    self._parts[name] = part
    return part

  def unregister(self, name: str) -> None:
    """Removes `name`, which must be the last registered (the indices of the
    others never change)."""
    if not self._parts or self.names[-1] != name:
      raise ValueError(f'only the last registered {self.kind} can be '
                       f'removed (the last is {self.names[-1:]!r})')
    del self._parts[name]

  def check_names(self, names: Iterable[str]) -> tuple[str, ...]:
    """`names` as a tuple of registered names, in registration order."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
      raise ValueError(f'{self.kind}s={show(names)} is not allowed: give a '
                       f'tuple of {self.kind} names, e.g. '
                       f'{tuple(self.names[:2])!r}')
    names = tuple(names)
    for name in names:
      self.get(name)
    if not names:
      raise ValueError(f'a program needs at least one {self.kind}; allowed: '
                       f'{", ".join(self._parts)}')
    return tuple(n for n in self._parts if n in names)
