#!/usr/bin/env bash
# Run a set of tests N times in a row and count the rounds that fail: the flakiness check.
#   bash scripts/repeat_tests.sh 30 process     # the tests that start processes, send signals, take locks
#   bash scripts/repeat_tests.sh 5 suite        # the whole default suite
#   bash scripts/repeat_tests.sh 10 -- tests/test_x.py -k y   # any pytest arguments
# Each round's output goes to runs/repeat/round-K.log; a summary line per round on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:?rounds}; shift
what=${1:-process}; shift || true
case "$what" in
  process) args=(-m "" tests/integration/faults/test_kill_soak.py tests/unit/runs/test_rundir.py tests/unit/runs/test_fsutil.py tests/integration/faults/test_faults.py
                 tests/integration/faults/test_faults_more.py tests/unit/data/test_data_scale.py tests/integration/parallel/test_parallel.py
                 tests/unit/train/test_train.py::test_sigkill_mid_checkpoint_leaves_previous_valid
                 tests/unit/train/test_train.py::test_sigterm_saves_and_exits_143 tests/unit/train/test_train.py::test_ddp_two_ranks_match_one
                 tests/unit/train/test_schedules.py::test_time_budget_ranks_agree_under_ddp tests/unit/data/test_mixture.py::test_a_mixture_under_torchrun_matches_one_process
                 tests/unit/data/test_data_loader.py::test_workers_shut_down tests/unit/data/test_data_loader.py::test_interpreter_exit_does_not_hang) ;;
  suite) args=() ;;
  --) args=("$@") ;;
  *) echo "usage: $0 N process|suite|-- PYTEST-ARGS" >&2; exit 2 ;;
esac
mkdir -p runs/repeat
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failed=0
for k in $(seq 1 "$n"); do
  start=$(date +%s)
  if .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" > "runs/repeat/round-$k.log" 2>&1; then
    status=pass
  else
    status=FAIL; failed=$((failed + 1))
  fi
  echo "round $k/$n: $status ($(( $(date +%s) - start )) s; $(tail -1 "runs/repeat/round-$k.log"))"
done
echo "$((n - failed)) of $n rounds passed"
[ "$failed" -eq 0 ]
