"""The telemetry hook's carrier, checked before the driver sees it (``checked_carrier``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sansmcp import CallerError
from sansmcp.io_adapters._common import MAX_CARRIER, checked_carrier


class Lying(Mapping[str, object]):
    """``items()`` says str values; ``[]`` answers 5."""

    def __getitem__(self, key: str) -> object:
        return 5

    def __iter__(self) -> Iterator[str]:
        return iter(["traceparent"])

    def __len__(self) -> int:
        return 1

    def items(self) -> object:  # type: ignore[override]
        return [("traceparent", "ok")]


def test_what_is_checked_is_what_is_kept() -> None:
    assert checked_carrier(Lying()) == {"traceparent": "ok"}


def test_a_carrier_over_its_bound_is_refused() -> None:
    assert checked_carrier({"baggage": "x" * (MAX_CARRIER - 7)}) == {
        "baggage": "x" * (MAX_CARRIER - 7)
    }
    with pytest.raises(CallerError, match="over 16,384 characters"):
        checked_carrier({"baggage": "x" * (MAX_CARRIER - 6)})


_ANY = st.recursive(
    st.none() | st.integers() | st.text(max_size=4) | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            inner.filter(lambda v: isinstance(v, str | int | bytes) or v is None), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@given(_ANY)
def test_every_other_return_is_a_caller_error_or_a_str_mapping(value: object) -> None:
    try:
        carrier = checked_carrier(value)
    except CallerError:
        return
    assert carrier is None or all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()
    )
