"""The benchmark program (`bash bench/run.sh [--quick|--full]`); not part of the test run."""
