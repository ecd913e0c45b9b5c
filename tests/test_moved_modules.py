"""The module paths of the 0.1 layout still import for one release, with a DeprecationWarning naming the new one."""

import importlib
import sys

import pytest

import multimodal  # noqa: F401  (installs the finder)
from multimodal._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_warns_and_hands_on_the_new_modules_names(old):
    sys.modules.pop(old, None)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")):
        module = importlib.import_module(old)
    public = [name for name in vars(new) if not name.startswith("_") and callable(getattr(new, name))]
    assert public and all(getattr(module, name) is getattr(new, name) for name in public)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
