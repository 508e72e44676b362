#!/bin/sh
# The upload step of lodge's CI templates: `lodge upload --prefix PREFIX PATHS` with the job's
# OIDC credentials (LODGE_CI_ROLE_ARN), then the ids of the files stored and the run's summary
# as outputs (GitHub: ids, summary, results; dotenv: LODGE_IDS, LODGE_SUMMARY, LODGE_RESULTS).
#   LODGE_CI_PATHS   files and directories, separated by blanks or newlines (no globbing)
#   LODGE_CI_PREFIX  the run's prefix, e.g. builds/$CI_PIPELINE_ID (default: none)
#   LODGE_CI_ARGS    more options of lodge upload (e.g. --exclude '*.tmp'), split at blanks
#   LODGE_CI_METADATA  true (default): record the job's commit, ref, run id and URL on each file
#                    (lodge upload --ci-metadata: cicommit, ciref, cirun, ciurl, cisystem, cirepo,
#                    cireftype)
# and lodge's own settings: LODGE_STORE, LODGE_CONFIG, LODGE_DB, LODGE_OWNER (see lodge(1)).
# Exits with lodge's status: 0 when every file is stored (active or duplicate).
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"

[ -n "${LODGE_CI_PATHS:-}" ] || lodge_ci_fail "LODGE_CI_PATHS is empty: name the files or directories to upload"
lodge_ci_metadata_flag
lodge_ci_credentials
results=${LODGE_CI_RESULTS:-$(lodge_ci_tmp)/uploaded.jsonl}

set -f # the paths are taken as given, never globbed here
# shellcheck disable=SC2086 # split at blanks on purpose
set -- $lodge_ci_metadata ${LODGE_CI_ARGS:-} ${LODGE_CI_PREFIX:+--prefix "$LODGE_CI_PREFIX"} -- $LODGE_CI_PATHS
set +f
status=0
lodge_ci_lodge --json upload "$@" > "$results" || status=$?

# One JSON object a line, keys in order (…"id":N,…"outcome":"…"…): the ids of the files stored.
ids=$(sed -n 's/^{.*"id":\([0-9][0-9]*\),.*"outcome":"\(active\|duplicate\|replayed\)".*/\1/p' "$results" | tr '\n' ' ')
ids=${ids% }
summary=$(grep '^{"summary":' "$results" | tail -n 1 || true)
lodge_ci_output ids LODGE_IDS "$ids"
lodge_ci_output summary LODGE_SUMMARY "$summary"
lodge_ci_output results LODGE_RESULTS "$results"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    {
        echo "### lodge upload ${LODGE_CI_PREFIX:+to \`$LODGE_CI_PREFIX\`}"
        echo
        echo "exit status $status; stored ids: ${ids:-none}"
        echo
        echo "\`$summary\`"
    } >> "$GITHUB_STEP_SUMMARY"
fi
echo "lodge-ci: stored ids: ${ids:-none}; exit status $status" >&2
exit "$status"
