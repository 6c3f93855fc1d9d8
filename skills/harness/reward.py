"""The paper's milestone reward; mirrors messages/reward.cpp (tests/actors/harness checks they agree)."""
import math

THRESHOLD = 0.05


def faster(t, t0):
    """b(t, t0) = (t0 - t) / t0 > 5%; unmeasured times and non-positive baselines never are."""
    if t is None or t0 is None or math.isnan(t) or math.isnan(t0) or t0 <= 0:
        return False
    return (t0 - t) / t0 > THRESHOLD


def milestone_reward(correct, t_new, t_eager, t_compile):
    if not correct:
        return -1
    if faster(t_new, t_eager) and faster(t_new, t_compile):
        return 3
    if faster(t_new, t_eager):
        return 2
    return 1
