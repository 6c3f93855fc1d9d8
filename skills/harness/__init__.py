"""The locked evaluation harness: verify, profile and reward one candidate solution.

worker.py is the persistent process a device's profiler slot runs; candidate_runner.py is the
isolated child each candidate runs in; guard.py holds the anti-hacking checks that run inside that
child; native_code.py judges the candidate's shared objects by the symbols they import, from the
worker; evaluator.py holds everything the trusted side decides (references, comparison, timing of
the baselines, the reward).
"""
