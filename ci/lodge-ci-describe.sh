#!/bin/sh
# Direct uploads, step 1 (the runner without credentials that built FILE): its name, size and
# SHA-256 for the job that reserves it, as outputs (GitHub: name, size, sha256; dotenv:
# LODGE_CI_NAME, LODGE_CI_SIZE, LODGE_CI_SHA256).   Usage: lodge-ci-describe.sh FILE
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"
if [ $# -eq 1 ] && [ -f "$1" ]; then :; else lodge_ci_fail "usage: lodge-ci-describe.sh FILE (a regular file)"; fi
lodge_ci_output name LODGE_CI_NAME "$(basename "$1")"
lodge_ci_output size LODGE_CI_SIZE "$(wc -c < "$1" | tr -d ' ')"
lodge_ci_output sha256 LODGE_CI_SHA256 "$(sha256sum "$1" | cut -d' ' -f1)"
