#!/bin/sh
# Direct uploads, step 4 (a job with credentials): `lodge confirm LODGE_CI_ID` checks the object
# step 3 sent (size, stamp, SHA-256) and makes the file active. Nothing to do for a duplicate.
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"
[ -n "${LODGE_CI_ID:-}" ] || lodge_ci_fail "LODGE_CI_ID is not set (lodge-ci-reserve.sh sets it)"
if [ "${LODGE_CI_OUTCOME:-reserved}" = duplicate ]; then
    echo "lodge-ci: #$LODGE_CI_ID was stored already" >&2
    exit 0
fi
lodge_ci_credentials
lodge_ci_lodge confirm "$LODGE_CI_ID"
