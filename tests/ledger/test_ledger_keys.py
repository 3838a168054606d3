"""Per-cell ledger keys: HKDF-SHA256 as RFC 5869 specifies it, and which key sealed a cell."""

from __future__ import annotations

import pytest
from agent_health.ledger import chain, keys, records

RUN_KEY = b"r" * 44


@pytest.mark.parametrize(
    ("ikm", "salt", "info", "length", "okm"),
    [  # RFC 5869 appendix A, test cases 1 to 3 (SHA-256)
        (
            bytes([0x0B] * 22),
            bytes(range(0x00, 0x0D)),
            bytes(range(0xF0, 0xFA)),
            42,
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        ),
        (
            bytes(range(0x00, 0x50)),
            bytes(range(0x60, 0xB0)),
            bytes(range(0xB0, 0x100)),
            82,
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
            "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
            "cc30c58179ec3e87c14c01d5c1f3434f1d87",
        ),
        (
            bytes([0x0B] * 22),
            b"",
            b"",
            42,
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
        ),
    ],
)
def test_hkdf_matches_the_rfc_test_vectors(
    ikm: bytes, salt: bytes, info: bytes, length: int, okm: str
) -> None:
    assert keys.hkdf(ikm, salt=salt, info=info, length=length).hex() == okm


def test_hkdf_agrees_with_the_cryptography_package() -> None:
    hkdf_mod = pytest.importorskip("cryptography.hazmat.primitives.kdf.hkdf")
    hashes = pytest.importorskip("cryptography.hazmat.primitives.hashes")
    for cell in ("run-a-0123456789-r0", "run-a-0123456789-r0.a1", "é" * 40):
        theirs = hkdf_mod.HKDF(
            algorithm=hashes.SHA256(), length=32, salt=keys.SALT, info=cell.encode()
        ).derive(RUN_KEY)
        assert keys.hkdf(RUN_KEY, salt=keys.SALT, info=cell.encode()) == theirs


def test_every_cell_and_attempt_has_its_own_key_as_text() -> None:
    names = ["c-0123456789-r0", "c-0123456789-r0.a1", "c-0123456789-r1"]
    derived = [keys.cell_key(RUN_KEY, n) for n in names]
    assert len(set(derived)) == 3
    assert all(len(k) == 44 and k == k.strip() and k.isascii() for k in derived)
    assert keys.cell_key(RUN_KEY, names[0]) == derived[0]  # deterministic: the operator re-derives
    assert keys.cell_key(b"s" * 44, names[0]) != derived[0]


def _sealed(key: bytes, cell: str) -> list[str]:
    sealer = chain.Sealer(key)
    items = [records.CellMeta(test_id="t", repeat=0, run_id=cell), records.CellEnd(status="passed")]
    return [records.dump_line(sealer.seal(r)) for r in items]


def test_the_sealing_key_of_a_cluster_cell_is_its_own_and_of_a_local_cell_the_run_key() -> None:
    cluster = _sealed(keys.cell_key(RUN_KEY, "c1"), "c1")
    assert keys.sealing_key(RUN_KEY, "c1", cluster) == keys.cell_key(RUN_KEY, "c1")
    assert chain.verify(cluster, keys.sealing_key(RUN_KEY, "c1", cluster)).ok
    local = _sealed(RUN_KEY, "c1")
    assert keys.sealing_key(RUN_KEY, "c1", local) == RUN_KEY
    # A cluster cell's ledger moved to another cell's place verifies with neither key.
    moved = keys.sealing_key(RUN_KEY, "c2", cluster)
    assert not chain.verify(cluster, moved).ok
