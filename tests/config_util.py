"""A test's shorthand for the config objects: flat options (``scheme="crc", workers=4, rounds=6,
round_timeout=5``) split among the classes whose fields they name. The library itself takes the
objects only; this is the tests' convenience."""

from dataclasses import fields


def split_options(options: dict, classes: dict) -> dict:
    """``{name: cls(**its options)}`` for ``classes`` (``{name: class}``), each option given to the
    first class with a field of its name; an option no class has is a ``TypeError``."""
    left, out = dict(options), {}
    for name, cls in classes.items():
        out[name] = cls(**{f.name: left.pop(f.name) for f in fields(cls) if f.name in left})
    if left:
        raise TypeError(f"no config object has the option(s) {', '.join(sorted(left))}")
    return out
