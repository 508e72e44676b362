#!/bin/sh
# The upload step of lodge's CI templates: `lodge upload --prefix PREFIX PATHS` with the job's
# OIDC credentials (LODGE_CI_ROLE_ARN), then the ids of the files stored and the run's summary
# as outputs (GitHub: ids, summary, results; dotenv: LODGE_IDS, LODGE_SUMMARY, LODGE_RESULTS).
#   LODGE_CI_PATHS   files and directories, separated by blanks or newlines (no globbing)
#   LODGE_CI_PREFIX  the run's prefix, e.g. builds/$CI_PIPELINE_ID (default: none)
#   LODGE_CI_ARGS    more arguments of lodge upload, one a line, taken as they are (never split
#                    at blanks, no quotes: --exclude and *.tmp on two lines, or --exclude=*.tmp)
#   LODGE_CI_INIT    true (default): create the ledger with `lodge init` when there is none yet
#                    (the first run); false: a missing ledger is an error (LEDGER_NOT_FOUND)
#   LODGE_CI_METADATA  true (default): record the job's commit, ref, run id and URL on each file
#                    (lodge upload --ci-metadata: cicommit, ciref, cirun, ciurl, cisystem, cirepo,
#                    cireftype)
# and lodge's own settings: LODGE_STORE, LODGE_CONFIG, LODGE_DB, LODGE_OWNER (see lodge(1)).
# Exits with lodge's status: 0 when every file is stored (active or duplicate).
set -eu
. "$(dirname "$0")/lodge-ci-lib.sh"

[ -n "${LODGE_CI_PATHS:-}" ] || lodge_ci_fail "LODGE_CI_PATHS is empty: name the files or directories to upload"
lodge_ci_metadata_flag
case ${LODGE_CI_INIT:-true} in
true | false) ;;
*) lodge_ci_fail "LODGE_CI_INIT is '$LODGE_CI_INIT': expected true or false" ;;
esac
lodge_ci_credentials
results=${LODGE_CI_RESULTS:-$(lodge_ci_tmp)/uploaded.jsonl}

# The first run of a pipeline has no ledger yet: only `lodge init` creates one (a no-op, or two
# at once, for a ledger that is there; it is run only when status says there is none).
if [ "${LODGE_CI_INIT:-true}" = true ]; then
    case $(lodge_ci_lodge --json status 2>&1) in
    *'"code":"LEDGER_NOT_FOUND"'*)
        lodge_ci_lodge init >&2
        echo "lodge-ci: there was no ledger: created it (lodge init)" >&2
        ;;
    esac
fi

set -f # the arguments and paths are taken as given, never globbed here
# shellcheck disable=SC2086 # the flag, or nothing
set -- $lodge_ci_metadata
# LODGE_CI_ARGS: one argument a line (IFS a newline: blanks and quotes stay in the argument).
lodge_ci_ifs=$IFS
IFS='
'
for a in ${LODGE_CI_ARGS:-}; do
    # An option's name holds no blank: "--exclude '*.map'" is the old blank-split form, whose
    # quotes would reach lodge as part of the pattern.
    case ${a%%=*} in
    -*[[:blank:]]*) lodge_ci_fail "LODGE_CI_ARGS line \"$a\": one argument a line, no quotes: put ${a%%[[:blank:]]*} and its value on two lines, or write ${a%%[[:blank:]]*}=VALUE" ;;
    esac
    set -- "$@" "$a"
done
IFS=$lodge_ci_ifs
if [ -n "${LODGE_CI_PREFIX:-}" ]; then set -- "$@" --prefix "$LODGE_CI_PREFIX"; fi
set -- "$@" --
# The paths: split at blanks and newlines.
for p in $LODGE_CI_PATHS; do set -- "$@" "$p"; done
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
