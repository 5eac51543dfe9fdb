"""RocketMQ's client version names (MQVersion.Version, by ordinal), lower-cased as RocketMQ 5 writes
them in its connection metrics' version label (MQVersion.getVersionDesc(version).toLowerCase())."""

from __future__ import annotations

from typing import Final

# The enum's constants in declaration order: a client's version number is an index into it.
_TABLE: Final = """
    v3_0_0_snapshot v3_0_0_alpha1 v3_0_0_beta1 v3_0_0_beta2 v3_0_0_beta3 v3_0_0_beta4 v3_0_0_beta5
    v3_0_0_beta6_snapshot v3_0_0_beta6 v3_0_0_beta7_snapshot v3_0_0_beta7 v3_0_0_beta8_snapshot
    v3_0_0_beta8 v3_0_0_beta9_snapshot v3_0_0_beta9 v3_0_0_final v3_0_1_snapshot v3_0_1 v3_0_2_snapshot
    v3_0_2 v3_0_3_snapshot v3_0_3 v3_0_4_snapshot v3_0_4 v3_0_5_snapshot v3_0_5 v3_0_6_snapshot v3_0_6
    v3_0_7_snapshot v3_0_7 v3_0_8_snapshot v3_0_8 v3_0_9_snapshot v3_0_9 v3_0_10_snapshot v3_0_10
    v3_0_11_snapshot v3_0_11 v3_0_12_snapshot v3_0_12 v3_0_13_snapshot v3_0_13 v3_0_14_snapshot v3_0_14
    v3_0_15_snapshot v3_0_15 v3_1_0_snapshot v3_1_0 v3_1_1_snapshot v3_1_1 v3_1_2_snapshot v3_1_2
    v3_1_3_snapshot v3_1_3 v3_1_4_snapshot v3_1_4 v3_1_5_snapshot v3_1_5 v3_1_6_snapshot v3_1_6
    v3_1_7_snapshot v3_1_7 v3_1_8_snapshot v3_1_8 v3_1_9_snapshot v3_1_9 v3_2_0_snapshot v3_2_0
    v3_2_1_snapshot v3_2_1 v3_2_2_snapshot v3_2_2 v3_2_3_snapshot v3_2_3 v3_2_4_snapshot v3_2_4
    v3_2_5_snapshot v3_2_5 v3_2_6_snapshot v3_2_6 v3_2_7_snapshot v3_2_7 v3_2_8_snapshot v3_2_8
    v3_2_9_snapshot v3_2_9 v3_3_1_snapshot v3_3_1 v3_3_2_snapshot v3_3_2 v3_3_3_snapshot v3_3_3
    v3_3_4_snapshot v3_3_4 v3_3_5_snapshot v3_3_5 v3_3_6_snapshot v3_3_6 v3_3_7_snapshot v3_3_7
    v3_3_8_snapshot v3_3_8 v3_3_9_snapshot v3_3_9 v3_4_1_snapshot v3_4_1 v3_4_2_snapshot v3_4_2
    v3_4_3_snapshot v3_4_3 v3_4_4_snapshot v3_4_4 v3_4_5_snapshot v3_4_5 v3_4_6_snapshot v3_4_6
    v3_4_7_snapshot v3_4_7 v3_4_8_snapshot v3_4_8 v3_4_9_snapshot v3_4_9 v3_5_1_snapshot v3_5_1
    v3_5_2_snapshot v3_5_2 v3_5_3_snapshot v3_5_3 v3_5_4_snapshot v3_5_4 v3_5_5_snapshot v3_5_5
    v3_5_6_snapshot v3_5_6 v3_5_7_snapshot v3_5_7 v3_5_8_snapshot v3_5_8 v3_5_9_snapshot v3_5_9
    v3_6_1_snapshot v3_6_1 v3_6_2_snapshot v3_6_2 v3_6_3_snapshot v3_6_3 v3_6_4_snapshot v3_6_4
    v3_6_5_snapshot v3_6_5 v3_6_6_snapshot v3_6_6 v3_6_7_snapshot v3_6_7 v3_6_8_snapshot v3_6_8
    v3_6_9_snapshot v3_6_9 v3_7_1_snapshot v3_7_1 v3_7_2_snapshot v3_7_2 v3_7_3_snapshot v3_7_3
    v3_7_4_snapshot v3_7_4 v3_7_5_snapshot v3_7_5 v3_7_6_snapshot v3_7_6 v3_7_7_snapshot v3_7_7
    v3_7_8_snapshot v3_7_8 v3_7_9_snapshot v3_7_9 v3_8_1_snapshot v3_8_1 v3_8_2_snapshot v3_8_2
    v3_8_3_snapshot v3_8_3 v3_8_4_snapshot v3_8_4 v3_8_5_snapshot v3_8_5 v3_8_6_snapshot v3_8_6
    v3_8_7_snapshot v3_8_7 v3_8_8_snapshot v3_8_8 v3_8_9_snapshot v3_8_9 v3_9_1_snapshot v3_9_1
    v3_9_2_snapshot v3_9_2 v3_9_3_snapshot v3_9_3 v3_9_4_snapshot v3_9_4 v3_9_5_snapshot v3_9_5
    v3_9_6_snapshot v3_9_6 v3_9_7_snapshot v3_9_7 v3_9_8_snapshot v3_9_8 v3_9_9_snapshot v3_9_9
    v4_0_0_snapshot v4_0_0 v4_0_1_snapshot v4_0_1 v4_0_2_snapshot v4_0_2 v4_0_3_snapshot v4_0_3
    v4_0_4_snapshot v4_0_4 v4_0_5_snapshot v4_0_5 v4_0_6_snapshot v4_0_6 v4_0_7_snapshot v4_0_7
    v4_0_8_snapshot v4_0_8 v4_0_9_snapshot v4_0_9 v4_1_0_snapshot v4_1_0 v4_1_1_snapshot v4_1_1
    v4_1_2_snapshot v4_1_2 v4_1_3_snapshot v4_1_3 v4_1_4_snapshot v4_1_4 v4_1_5_snapshot v4_1_5
    v4_1_6_snapshot v4_1_6 v4_1_7_snapshot v4_1_7 v4_1_8_snapshot v4_1_8 v4_1_9_snapshot v4_1_9
    v4_2_0_snapshot v4_2_0 v4_2_1_snapshot v4_2_1 v4_2_2_snapshot v4_2_2 v4_2_3_snapshot v4_2_3
    v4_2_4_snapshot v4_2_4 v4_2_5_snapshot v4_2_5 v4_2_6_snapshot v4_2_6 v4_2_7_snapshot v4_2_7
    v4_2_8_snapshot v4_2_8 v4_2_9_snapshot v4_2_9 v4_3_0_snapshot v4_3_0 v4_3_1_snapshot v4_3_1
    v4_3_2_snapshot v4_3_2 v4_3_3_snapshot v4_3_3 v4_3_4_snapshot v4_3_4 v4_3_5_snapshot v4_3_5
    v4_3_6_snapshot v4_3_6 v4_3_7_snapshot v4_3_7 v4_3_8_snapshot v4_3_8 v4_3_9_snapshot v4_3_9
    v4_4_0_snapshot v4_4_0 v4_4_1_snapshot v4_4_1 v4_4_2_snapshot v4_4_2 v4_4_3_snapshot v4_4_3
    v4_4_4_snapshot v4_4_4 v4_4_5_snapshot v4_4_5 v4_4_6_snapshot v4_4_6 v4_4_7_snapshot v4_4_7
    v4_4_8_snapshot v4_4_8 v4_4_9_snapshot v4_4_9 v4_5_0_snapshot v4_5_0 v4_5_1_snapshot v4_5_1
    v4_5_2_snapshot v4_5_2 v4_5_3_snapshot v4_5_3 v4_5_4_snapshot v4_5_4 v4_5_5_snapshot v4_5_5
    v4_5_6_snapshot v4_5_6 v4_5_7_snapshot v4_5_7 v4_5_8_snapshot v4_5_8 v4_5_9_snapshot v4_5_9
    v4_6_0_snapshot v4_6_0 v4_6_1_snapshot v4_6_1 v4_6_2_snapshot v4_6_2 v4_6_3_snapshot v4_6_3
    v4_6_4_snapshot v4_6_4 v4_6_5_snapshot v4_6_5 v4_6_6_snapshot v4_6_6 v4_6_7_snapshot v4_6_7
    v4_6_8_snapshot v4_6_8 v4_6_9_snapshot v4_6_9 v4_7_0_snapshot v4_7_0 v4_7_1_snapshot v4_7_1
    v4_7_2_snapshot v4_7_2 v4_7_3_snapshot v4_7_3 v4_7_4_snapshot v4_7_4 v4_7_5_snapshot v4_7_5
    v4_7_6_snapshot v4_7_6 v4_7_7_snapshot v4_7_7 v4_7_8_snapshot v4_7_8 v4_7_9_snapshot v4_7_9
    v4_8_0_snapshot v4_8_0 v4_8_1_snapshot v4_8_1 v4_8_2_snapshot v4_8_2 v4_8_3_snapshot v4_8_3
    v4_8_4_snapshot v4_8_4 v4_8_5_snapshot v4_8_5 v4_8_6_snapshot v4_8_6 v4_8_7_snapshot v4_8_7
    v4_8_8_snapshot v4_8_8 v4_8_9_snapshot v4_8_9 v4_9_0_snapshot v4_9_0 v4_9_1_snapshot v4_9_1
    v4_9_2_snapshot v4_9_2 v4_9_3_snapshot v4_9_3 v4_9_4_snapshot v4_9_4 v4_9_5_snapshot v4_9_5
    v4_9_6_snapshot v4_9_6 v4_9_7_snapshot v4_9_7 v4_9_8_snapshot v4_9_8 v4_9_9_snapshot v4_9_9
    v5_0_0_snapshot v5_0_0 v5_0_1_snapshot v5_0_1 v5_0_2_snapshot v5_0_2 v5_0_3_snapshot v5_0_3
    v5_0_4_snapshot v5_0_4 v5_0_5_snapshot v5_0_5 v5_0_6_snapshot v5_0_6 v5_0_7_snapshot v5_0_7
    v5_0_8_snapshot v5_0_8 v5_0_9_snapshot v5_0_9 v5_1_0_snapshot v5_1_0 v5_1_1_snapshot v5_1_1
    v5_1_2_snapshot v5_1_2 v5_1_3_snapshot v5_1_3 v5_1_4_snapshot v5_1_4 v5_1_5_snapshot v5_1_5
    v5_1_6_snapshot v5_1_6 v5_1_7_snapshot v5_1_7 v5_1_8_snapshot v5_1_8 v5_1_9_snapshot v5_1_9
    v5_2_0_snapshot v5_2_0 v5_2_1_snapshot v5_2_1 v5_2_2_snapshot v5_2_2 v5_2_3_snapshot v5_2_3
    v5_2_4_snapshot v5_2_4 v5_2_5_snapshot v5_2_5 v5_2_6_snapshot v5_2_6 v5_2_7_snapshot v5_2_7
    v5_2_8_snapshot v5_2_8 v5_2_9_snapshot v5_2_9 v5_3_0_snapshot v5_3_0 v5_3_1_snapshot v5_3_1
    v5_3_2_snapshot v5_3_2 v5_3_3_snapshot v5_3_3 v5_3_4_snapshot v5_3_4 v5_3_5_snapshot v5_3_5
    v5_3_6_snapshot v5_3_6 v5_3_7_snapshot v5_3_7 v5_3_8_snapshot v5_3_8 v5_3_9_snapshot v5_3_9
    v5_4_0_snapshot v5_4_0 v5_4_1_snapshot v5_4_1 v5_4_2_snapshot v5_4_2 v5_4_3_snapshot v5_4_3
    v5_4_4_snapshot v5_4_4 v5_4_5_snapshot v5_4_5 v5_4_6_snapshot v5_4_6 v5_4_7_snapshot v5_4_7
    v5_4_8_snapshot v5_4_8 v5_4_9_snapshot v5_4_9 v5_5_0_snapshot v5_5_0 v5_5_1_snapshot v5_5_1
    v5_5_2_snapshot v5_5_2 v5_5_3_snapshot v5_5_3 v5_5_4_snapshot v5_5_4 v5_5_5_snapshot v5_5_5
    v5_5_6_snapshot v5_5_6 v5_5_7_snapshot v5_5_7 v5_5_8_snapshot v5_5_8 v5_5_9_snapshot v5_5_9
    v5_6_0_snapshot v5_6_0 v5_6_1_snapshot v5_6_1 v5_6_2_snapshot v5_6_2 v5_6_3_snapshot v5_6_3
    v5_6_4_snapshot v5_6_4 v5_6_5_snapshot v5_6_5 v5_6_6_snapshot v5_6_6 v5_6_7_snapshot v5_6_7
    v5_6_8_snapshot v5_6_8 v5_6_9_snapshot v5_6_9 v5_7_0_snapshot v5_7_0 v5_7_1_snapshot v5_7_1
    v5_7_2_snapshot v5_7_2 v5_7_3_snapshot v5_7_3 v5_7_4_snapshot v5_7_4 v5_7_5_snapshot v5_7_5
    v5_7_6_snapshot v5_7_6 v5_7_7_snapshot v5_7_7 v5_7_8_snapshot v5_7_8 v5_7_9_snapshot v5_7_9
    v5_8_0_snapshot v5_8_0 v5_8_1_snapshot v5_8_1 v5_8_2_snapshot v5_8_2 v5_8_3_snapshot v5_8_3
    v5_8_4_snapshot v5_8_4 v5_8_5_snapshot v5_8_5 v5_8_6_snapshot v5_8_6 v5_8_7_snapshot v5_8_7
    v5_8_8_snapshot v5_8_8 v5_8_9_snapshot v5_8_9 v5_9_0_snapshot v5_9_0 v5_9_1_snapshot v5_9_1
    v5_9_2_snapshot v5_9_2 v5_9_3_snapshot v5_9_3 v5_9_4_snapshot v5_9_4 v5_9_5_snapshot v5_9_5
    v5_9_6_snapshot v5_9_6 v5_9_7_snapshot v5_9_7 v5_9_8_snapshot v5_9_8 v5_9_9_snapshot v5_9_9
    higher_version
"""
_NAMES: Final = tuple(_TABLE.split())


def version_name(version: int) -> str:
    """The name of client version *version*: past the table, its last entry (higher_version), as
    MQVersion.getVersionDesc answers."""
    if version < 0:
        return str(version)
    return _NAMES[min(version, len(_NAMES) - 1)]
