/*
 * lodge's upload / repair / sweep / reconcile protocol, as a Promela model for SPIN 6.
 *
 * One ledger (SQLite: every write transaction is BEGIN IMMEDIATE, so transactions are
 * serialised: each is one `atomic` step here), one bucket, up to two uploaders of the
 * same owner and content, up to two sweepers, repair, reconcile, one foreign object in
 * the bucket (the macros ONE_UPLOADER, ONE_SWEEPER, NO_REPAIR, NO_RECONCILE pick the
 * workers of a configuration). Workers may crash instead of any step and restart;
 * committed ledger state survives, a PUT already sent may still land until its bound.
 * The seeded bugs are the BUG_* macros. See model/README.md for what each process stands
 * for, the bounds, the configurations, the properties and how to run the checks.
 *
 * TAGS: the store tags objects (Azure; S3 with tag_state): every put tags its object
 * pending, and a lifecycle backstop expires objects still pending long after every
 * deadline; an activation (the uploader's confirm, reconcile's roll-forward) records on the
 * task that the committed tag is owed, tags the object and settles the task, and a sweep
 * finishes a tag still owed.
 *
 * Time. `now` is true time (what CLOCK_MONOTONIC measures), in ticks. The ledger's wall
 * clock is WALL = now + skew, where skew only grows (a clock step forward) and never
 * exceeds SKEW: the wall clock may run ahead of true time by at most SKEW ticks. A
 * backward step only postpones deadlines, due times and lease expiry, so it is not
 * modelled. The design requires GRACE > SKEW (+ the PUT margin, folded into the landing
 * bound below); fix (b) (a verify pass one grace after the delete) widens that to
 * 2*GRACE > SKEW, which the configuration `clockstep` (SKEW = GRACE) checks.
 *
 * SHARES = 1 or 2: de-duplication saves storage, never a path. Sharing rows (proctype
 * Sharer, the configurations `shares` and `sharelease`) are files of the same content at
 * other paths: each gets a row of its own, ACTIVE at once, that shares the object of the
 * row that wrote it (content_of), with a task IGNORED while it is alive. The object is
 * deleted only when no alive row uses its key (SqlLedger::decide, key_in_use).
 *
 * Renewal (every configuration, RENEWS per attempt): while its transfer makes progress the
 * uploader renews its row's deadline (and its task's not-before), and only once that
 * committed moves its own landing bound.
 *
 * RESUME: a staged upload whose transfer failed is resumed by the next sender of the same
 * content: fail_resumable (UPLOADING -> UPLOAD_FAILED, task due one grace later,
 * no verify pass) and the revive inside reserve (UPLOAD_FAILED -> UPLOADING, the same key,
 * a new holder). Every row is a staged upload here; an earlier sender's completion of it may
 * still land until its own bound (put_old).
 *
 * BATCH: an uploader with a next attempt reserves two files in one transaction
 * (UploadLedger::reserve_batch): its attempt's row and the next attempt's row (a file of
 * another content), each exactly as a reserve of its own, the second seeing the first. Both
 * PUTs are in flight from that commit; the second file then goes on with its row, no reserve
 * of its own, its deadline and bound counted from the batch's reserve. A crash abandons both.
 */

/* ---------------------------------------------------------------- bounds */
#ifndef SKEW
#define SKEW 1          /* the wall clock may be ahead of true time by at most this */
#endif
#ifndef GRACE
#define GRACE 2         /* policy grace */
#endif
#ifndef DEADLINE
#define DEADLINE 1      /* policy deadline */
#endif
#define LEASE 1         /* sweep lease */
#define BACKOFF 1       /* cleanup_backoff_ms, collapsed to one tick */
#define MAX_RETRIES 1   /* sweep.max_retries */
#ifndef TMAX
#define TMAX 3          /* the clock stops here; Final then jumps past every due time */
#endif
#ifndef MAX_FILES
#ifdef BATCH
#define MAX_FILES 2     /* BATCH: the batch's two files (two contents) fit the quota */
#else
#define MAX_FILES 1     /* the policy's max_files for the one owner */
#endif
#endif
#ifndef CRASHES
#define CRASHES 1       /* crashes in one execution, any process, any step */
#endif
#ifndef STORE_FAILS
#define STORE_FAILS 1   /* deletes that fail (store unreachable); 2 makes a dead letter */
#endif
#ifndef A0
#define A0 1            /* upload attempts of uploader 0 (a crash may start the next) */
#endif
#define A1 1            /* upload attempts of uploader 1 */
/* BATCH: uploader 0 reserves its attempt's row and the next attempt's row in one
   transaction (UploadLedger::reserve_batch), the second file of another content */
#ifdef BATCH
#if A0 < 2
#error "BATCH reserves the next attempt's row too: it needs A0 >= 2"
#endif
#ifdef RESUME
#error "BATCH with RESUME is not modelled"
#endif
#define BATCH_DIG 1     /* the batch's second file: a content of its own */
#endif
#ifndef SHARES
#define SHARES 0        /* sharing rows (one Sharer each): 0, 1 or 2 */
#endif
#ifndef RENEWS
#define RENEWS 1        /* renewals (UploadLedger::renew) per upload attempt */
#endif
/* fix (b)'s verify pass comes this long after the first delete. The code waits the row's
   deadline length + GRACE; one GRACE (the weaker case) is enough without RESUME. With it a
   revived row's new sender may fail definitely (due at once) right after the earlier
   sender's ambiguous failure, so the first delete can come one deadline before that
   sender's completion can no longer land: the code's wait is modelled. */
#ifdef RESUME
#define VERIFY_DELAY (DEADLINE + GRACE)
#else
#define VERIFY_DELAY GRACE
#endif
/* each sweeper, repair and reconcile does one run; a crash ends it and starts another */
#define LIMIT 4         /* sweep --limit: claims per run */
#define MAXCLAIMS 3     /* "no spin": one run claims one task at most this often */

#define NR (A0 + A1)    /* row slots; slot i is the row whose object key is key i */
#define FOREIGN NR      /* the foreign object's key: no row of this ledger has it */
#define SLOTS (NR + 1 + SHARES)  /* then one slot per sharing row, after FOREIGN */
#if SLOTS > 6
#error "the sweeps' claim counters (cl0..cl5) are written out for at most 6 slots"
#endif
#define NONE 255

/* workers: 2 uploaders, 2 sweepers, repair, reconcile, and SHARES sharers */
#define NWORKERS (6 + SHARES)

/* file_upload.upload_status (0 = no row with this key) */
#define R_NONE 0
#define R_UPLOADING 1
#define R_ACTIVE 2
#define R_FAILED 3

/* cleanup_task.status (0 = no task) */
#define T_NONE 0
#define T_PENDING 1
#define T_PROCESSING 2
#define T_RETRY 3
#define T_SUCCESS 4
#define T_FAILED 5
#define T_IGNORED 6

/* a PUT, as the server sees it */
#define P_NONE 0
#define P_INFLIGHT 1    /* sent; the server may still store it, until put_lim */
#define P_LANDED 2      /* stored (conditional create succeeded) */
#define P_REFUSED 3     /* the server refused it, or the body never left: nothing lands */

/* reserve outcomes */
#define O_RESERVED 0
#define O_DUPLICATE 1
#define O_IN_PROGRESS 2
#define O_QUOTA 3

/* decide outcomes */
#define D_LOST 0
#define D_ALLOWED 1
#define D_IGNORED 2
#define D_POSTPONED 3
#define D_TAG 4         /* TAGS: the row is alive and ACTIVE and its task owes the tag */

#define WALL (now + skew)

/* ---------------------------------------------------------------- state */
byte now = 0;
byte skew = 0;

/* file_upload, one slot per key (keys are UNIQUE and never reused) */
byte row_st[SLOTS];
bit  row_del[SLOTS];      /* is_deleted */
bit  row_dig[SLOTS];      /* sha256: two possible contents */
bit  row_amb[SLOTS];      /* failed ambiguously or by deadline: fix (b) verifies again */
byte row_dl[SLOTS];       /* upload_deadline_at (wall clock) */
#if SHARES
byte row_cof[SLOTS];      /* a sharing row's content_of: the slot (so the key) of the row that
                             wrote its object; its own key is never written to the store */
bit  key_done[SLOTS];     /* ghost: a cleanup of this key was allowed (no alive row used it) */
#endif

/* cleanup_task, one per row (UNIQUE (record_id, task_type)) */
byte task_st[SLOTS];
byte task_next[SLOTS];    /* next_retry_at (wall clock) */
byte task_lease[SLOTS];   /* lease_until (wall clock) */
byte task_ver[SLOTS];     /* lease_version: the fencing token */
byte task_retry[SLOTS];   /* retry_count */
bit  task_vfy[SLOTS];     /* fix (b): the first delete is done, the verify pass is due */

#ifdef TAGS
bit  task_owe[SLOTS];     /* tag_owed: the object is still owed the committed tag */
bit  obj_com[SLOTS];      /* the object is tagged committed (0: pending, as every put tags it) */
#define CLEAR_OWE(k) task_owe[k] = 0
#else
#define CLEAR_OWE(k) skip
#endif

/* the bucket */
bit  obj[SLOTS];          /* obj[FOREIGN] is another writer's object */
byte put_st[SLOTS];       /* the PUT of the row's current sender */
byte put_lim[SLOTS];      /* true time after which the PUT can no longer land */
#ifdef RESUME
byte row_hold[SLOTS];     /* holder: the sender (an upload attempt, 1-based) that holds the row */
byte put_old[SLOTS];      /* an earlier sender's completion of the row's staged upload may still
                             land before this true time (0: none); the same bytes, the same key */
bit  task_stale[SLOTS];   /* the task was claimed from an expired lease: the worker that held it
                             may still be deleting (its decide allowed it, then it stalled) */
#endif

/* the environment */
byte crash_budget = CRASHES;
byte store_fails = STORE_FAILS;
byte finished = 0;        /* workers that have ended for good */

/* scratch for loops inside one atomic step (not part of the state vector) */
hidden byte h_i;
hidden byte h_j;
hidden byte h_n;
hidden byte h_due;
hidden byte h_sh;         /* decide: the dead row is presented as alive (SHARES) */
#ifdef BATCH
hidden byte h_out;        /* reserve_batch: the second file's reserve outcome */
#endif

/* ---------------------------------------------------------------- predicates */
#define ALIVE(k)   (row_st[k] != R_NONE && !row_del[k])
#define DEAD(k)    (row_st[k] != R_NONE && row_del[k])
#define LIVE_TASK(k) (task_st[k] == T_PENDING || task_st[k] == T_RETRY || task_st[k] == T_PROCESSING)
/* SqliteLedger k_due: PENDING/RETRY whose time has come, or PROCESSING whose lease expired */
#define DUE(k) (((task_st[k] == T_PENDING || task_st[k] == T_RETRY) && task_next[k] <= WALL) \
                || (task_st[k] == T_PROCESSING && task_lease[k] < WALL))
#define MAX(a, b) ((a) > (b) -> (a) : (b))
/* the key of a row's object (content_key): its own, or the key of the row it shares */
#if SHARES
#define OKEY(k) ((k) > FOREIGN -> row_cof[k] : (k))
#else
#define OKEY(k) (k)
#endif

/* I1: no alive ACTIVE row points at a missing object */
#define I1_AT(k) (!(row_st[k] == R_ACTIVE && !row_del[k]) || obj[k])
#ifndef TAGS
/* I1b: an alive ACTIVE row's task is IGNORED (confirm changes both in one transaction),
   so no compensation is ever scheduled against a live object */
#define I1B_AT(k) (!(row_st[k] == R_ACTIVE && !row_del[k]) || task_st[k] == T_IGNORED)
#define I1C_AT(k) 1
#else
/* a task that still records the committed tag as owed: live, or a dead letter (which
   status reports and lodge retry requeues) */
#define OWES(k) (task_owe[k] && (LIVE_TASK(k) || task_st[k] == T_FAILED))
/* I1b: an alive ACTIVE row's task is IGNORED, or it is there only to finish the tag */
#define I1B_AT(k) (!(row_st[k] == R_ACTIVE && !row_del[k]) || task_st[k] == T_IGNORED || OWES(k))
/* I1c: an alive ACTIVE row's object still tagged pending has a task that owes its tag
   (otherwise nothing ever tags it, and the backstop expires an ACTIVE object) */
#define I1C_AT(k) (!(row_st[k] == R_ACTIVE && !row_del[k] && obj[k] && !obj_com[k]) || OWES(k))
#endif
#define AL(k) (ALIVE(k) -> 1 : 0)
#define SAME_ALIVE(a, b) (ALIVE(a) && ALIVE(b) && row_dig[a] == row_dig[b])

#if NR == 2
#define I1_ALL (I1_AT(0) && I1_AT(1) && I1_AT(2))
#define I1B_ALL (I1B_AT(0) && I1B_AT(1) && I1B_AT(2))
#define I1C_ALL (I1C_AT(0) && I1C_AT(1) && I1C_AT(2))
#define ALIVE_COUNT (AL(0) + AL(1))
#define I4_ALL (!SAME_ALIVE(0, 1))
#elif NR == 3
#define I1_ALL (I1_AT(0) && I1_AT(1) && I1_AT(2) && I1_AT(3))
#define I1B_ALL (I1B_AT(0) && I1B_AT(1) && I1B_AT(2) && I1B_AT(3))
#define I1C_ALL (I1C_AT(0) && I1C_AT(1) && I1C_AT(2) && I1C_AT(3))
#define ALIVE_COUNT (AL(0) + AL(1) + AL(2))
#define I4_ALL (!SAME_ALIVE(0, 1) && !SAME_ALIVE(0, 2) && !SAME_ALIVE(1, 2))
#else
#error "the invariant macros are written out for NR = 2 or 3"
#endif

#if SHARES
#define SH1 (FOREIGN + 1)  /* the sharing rows' slots */
#define SH2 (FOREIGN + 2)
#define ACTIVE_AT(k) (row_st[k] == R_ACTIVE && !row_del[k])
/* row r is alive and uses key j (wrote it, or shares it) */
#define USES(r, j) (ALIVE(r) && OKEY(r) == (j))
/* key_in_use(key of row k, except k): another alive row uses row k's object */
#define OTHER_USES(r, k) ((r) != (k) && USES(r, OKEY(k)))
/* I1 and I1b over a sharing row: alive, its (shared) object is there and its task IGNORED */
#define I1S_AT(k) (!ACTIVE_AT(k) || (obj[OKEY(k)] && task_st[k] == T_IGNORED))
/* I7: an object of ours may stay while a row using it is alive and ACTIVE, or a task of
   such a row is a dead letter */
#define KEPT_BY(r, j) (row_st[r] != R_NONE && OKEY(r) == (j) && (ACTIVE_AT(r) || task_st[r] == T_FAILED))
#if SHARES == 1
#define USED_ELSEWHERE(k) (OTHER_USES(OKEY(k), k) || OTHER_USES(SH1, k))
#define IN_USE(j) (USES(j, j) || USES(SH1, j))
#define KEPT(j) (KEPT_BY(j, j) || KEPT_BY(SH1, j))
#define I1S_ALL (I1S_AT(SH1))
#elif SHARES == 2
#define USED_ELSEWHERE(k) (OTHER_USES(OKEY(k), k) || OTHER_USES(SH1, k) || OTHER_USES(SH2, k))
#define IN_USE(j) (USES(j, j) || USES(SH1, j) || USES(SH2, j))
#define KEPT(j) (KEPT_BY(j, j) || KEPT_BY(SH1, j) || KEPT_BY(SH2, j))
#define I1S_ALL (I1S_AT(SH1) && I1S_AT(SH2))
#else
#error "the sharing macros are written out for SHARES = 1 or 2"
#endif
#ifndef NO_RECONCILE
/* Reconcile here lists a dead row's object with no live task as a leftover; ops::reconcile
   also counts the row's alive sharers (rows_by_key) and leaves an object in use alone. */
#error "reconcile's rule for shared objects is not modelled: SHARES needs NO_RECONCILE"
#endif
#else
#define KEPT(j) ((row_st[j] == R_ACTIVE && !row_del[j]) || task_st[j] == T_FAILED)
#endif

/* I1, I1b, I3 (quota: alive rows <= max_files), I4 (one alive row per owner + digest).
   Asserted after every transition of the ledger or the bucket (the only steps that can
   change them), which is the same as asserting them in every reachable state. */
#define CHECK_INV check_inv()

inline check_inv() {
  assert(I1_ALL);                    /* I1 */
  assert(I1B_ALL);                   /* I1b */
#ifdef TAGS
  assert(I1C_ALL);                   /* I1c */
#endif
  assert(ALIVE_COUNT <= MAX_FILES);  /* I3 */
  assert(I4_ALL)                     /* I4 */
#if SHARES
  ; assert(I1S_ALL)                  /* I1, I1b over the sharing rows */
#endif
}

/* ---------------------------------------------------------------- ledger transitions */

/* SqliteLedger::ensure_pending_task: a missing task is created, a held one left to its
   worker, a waiting one never made due earlier, a finished one reset to PENDING. */
inline ensure_pending_task(k, due) {
  if
  :: task_st[k] == T_NONE ->
     task_st[k] = T_PENDING; task_next[k] = due; task_retry[k] = 0; task_vfy[k] = 0
  :: task_st[k] == T_PROCESSING -> skip
  :: task_st[k] == T_PENDING || task_st[k] == T_RETRY ->
     if
     :: task_next[k] < due -> task_next[k] = due
     :: else -> skip
     fi;
     CLEAR_OWE(k)  /* the row is dead: its object is deleted, not tagged */
  :: else ->
     task_st[k] = T_PENDING; task_next[k] = due; task_retry[k] = 0; task_lease[k] = 0;
     task_vfy[k] = 0; CLEAR_OWE(k)
  fi
}

/* SqliteLedger::reserve: alive duplicate -> duplicate / in_progress; quota; then row
   UPLOADING with its deadline and its task PENDING due after deadline + grace, in one
   transaction. Idempotency keys are not modelled. The uploader reads its monotonic
   clock at the same moment (steady_at_reserve): put_lim is the true time after which
   its PUT can no longer land (client abort at deadline - margin, server lag <= margin). */
inline reserve_check(dig, out) {
  h_j = NONE; h_n = 0; h_i = 0;
  do
  :: h_i < NR ->
     if
     :: ALIVE(h_i) ->
        h_n++;
        if
        :: row_dig[h_i] == dig -> h_j = h_i
        :: else -> skip
        fi
     :: else -> skip
     fi;
     h_i++
  :: else -> break
  od;
  if
  :: h_j != NONE && row_st[h_j] == R_UPLOADING -> out = O_IN_PROGRESS
  :: h_j != NONE && row_st[h_j] != R_UPLOADING -> out = O_DUPLICATE
  :: h_j == NONE && h_n >= MAX_FILES -> out = O_QUOTA
  :: else -> out = O_RESERVED
  fi;
  h_i = 0; h_j = 0; h_n = 0
}

inline reserve_insert(r, dig) {
  row_st[r] = R_UPLOADING; row_del[r] = 0; row_dig[r] = dig; row_amb[r] = 0;
  row_dl[r] = WALL + DEADLINE;
  task_st[r] = T_PENDING; task_next[r] = WALL + DEADLINE + GRACE; task_ver[r] = 0;
  task_retry[r] = 0; task_vfy[r] = 0;
  put_lim[r] = now + DEADLINE
}

/* SqliteLedger::confirm: row UPLOADING -> ACTIVE and its task PENDING/RETRY -> IGNORED,
   both or neither (a task a sweeper holds rolls the confirm back). TAGS, owing the tag
   (`owe`): the task stays as it is and records the tag as owed (tag_owed). */
inline confirm(r, owe, ok) {
#ifndef BUG_CONFIRM_NO_TASK
  if
  :: row_st[r] == R_UPLOADING && !row_del[r] && (task_st[r] == T_PENDING || task_st[r] == T_RETRY) ->
     row_st[r] = R_ACTIVE;
#ifdef TAGS
     if
     :: owe -> task_owe[r] = 1
     :: else -> task_st[r] = T_IGNORED; task_lease[r] = 0
     fi;
#else
     task_st[r] = T_IGNORED; task_lease[r] = 0;
#endif
     ok = 1
  :: else -> ok = 0
  fi
#else
  /* seeded bug: the row is activated, the task is left as it was */
  if
  :: row_st[r] == R_UPLOADING && !row_del[r] -> row_st[r] = R_ACTIVE; ok = 1
  :: else -> ok = 0
  fi
#endif
}

/* The sender of the uploader running these (its local `hold`) still holds row r. Without
   RESUME a row only ever has the sender that reserved it. */
#ifdef RESUME
#define HOLDS(r) (row_hold[r] == hold)
#else
#define HOLDS(r) 1
#endif

/* SqliteLedger::mark_failed: UPLOADING -> UPLOAD_FAILED + deleted; a definite failure
   makes the task due now (upload compensates at once), an ambiguous one keeps it. */
inline mark_failed(r, definite, ok) {
  if
  :: row_st[r] == R_UPLOADING ->
     /* a pass already owed stays owed (a revived row's earlier sender), as in the code */
     row_st[r] = R_FAILED; row_del[r] = 1; row_amb[r] = row_amb[r] | (1 - definite);
     if
     :: definite && (task_st[r] == T_PENDING || task_st[r] == T_RETRY) -> task_next[r] = WALL
     :: else -> skip
     fi;
     ok = 1
  :: else -> ok = 0
  fi
}

/* SqlLedger::renew, then Uploader::Renewal::progress: the conditional UPDATE (the row still
   UPLOADING, alive, held by this sender, its deadline not yet passed by the ledger's wall
   clock) makes the deadline WALL + DEADLINE and a waiting task's not-before that + GRACE (a
   task a sweep holds is left: its decide reads the new deadline). Only once it committed
   does the sender's bound move: to the steady time read before the renewal + DEADLINE (the
   margin folded in as at reserve); the clocks are read in the same step here, the latest
   bound a renewal can give. out: 0 renewed, 1 past_deadline (the bound stays, the transfer
   goes on), 2 not_uploading / not_holder (the transfer stops).
   VARIANT_RENEW_NO_STATE and VARIANT_RENEW_NO_HOLDER drop one check: neither breaks a
   property here (model/README.md, "Seeded bugs", says why), so they are not seeded bugs. */
#ifndef VARIANT_RENEW_NO_STATE
#define RENEW_STATE(r) (row_st[r] == R_UPLOADING && !row_del[r])
#else
#define RENEW_STATE(r) (row_st[r] != R_NONE)  /* variant: no state check */
#endif
#ifndef VARIANT_RENEW_NO_HOLDER
#define RENEW_HOLDER(r) HOLDS(r)
#else
#define RENEW_HOLDER(r) 1                     /* variant: no holder check */
#endif
/* the renewing sender's own bound: put_lim while it holds the row, else its completion's
   (put_old), which a revive moved there */
#ifdef RESUME
#define MOVE_BOUND(r) if :: HOLDS(r) -> put_lim[r] = now + DEADLINE :: else -> put_old[r] = now + DEADLINE + 1 fi
#else
#define MOVE_BOUND(r) put_lim[r] = now + DEADLINE
#endif
inline renew(r, out) {
#ifdef BUG_RENEW_BOUND_FIRST
  MOVE_BOUND(r);  /* seeded bug: the bound moves before the UPDATE commits, whatever it finds */
#endif
  if
  :: RENEW_STATE(r) && RENEW_HOLDER(r) && row_dl[r] > WALL ->
     row_dl[r] = WALL + DEADLINE;
     if
     :: task_st[r] == T_PENDING || task_st[r] == T_RETRY -> task_next[r] = WALL + DEADLINE + GRACE
     :: else -> skip
     fi;
#ifndef BUG_RENEW_BOUND_FIRST
     MOVE_BOUND(r);
#endif
     out = 0
  :: RENEW_STATE(r) && RENEW_HOLDER(r) && row_dl[r] <= WALL -> out = 1
  :: else -> out = 2
  fi
}

#ifdef RESUME
/* UploadLedger::fail_resumable: a staged upload's transfer failed with its staged upload
   intact (a part failed, the stall, the deadline, a second Ctrl-C): UPLOADING -> UPLOAD_FAILED
   + deleted, a waiting task due one grace from now, no verify pass (a part never becomes an
   object by itself: this sender's completion was never sent). VARIANT_RESUMABLE_NOW makes
   the task due at once: no property fails either (model/README.md says why). */
inline fail_resumable(r, ok) {
  if
  :: row_st[r] == R_UPLOADING ->
     row_st[r] = R_FAILED; row_del[r] = 1;
     if
#ifndef VARIANT_RESUMABLE_NOW
     :: task_st[r] == T_PENDING || task_st[r] == T_RETRY -> task_next[r] = WALL + GRACE
#else
     /* variant: the task is due at once */
     :: task_st[r] == T_PENDING || task_st[r] == T_RETRY -> task_next[r] = WALL
#endif
     :: else -> skip
     fi;
     ok = 1
  :: else -> ok = 0
  fi
}

/* inside SqlLedger::reserve, where it would insert: the newest resumable row of the same
   content (UPLOAD_FAILED, a staged upload, its task PENDING or RETRY: never PROCESSING, a
   sweep may be deleting) or NONE. Nor a task ever claimed from an expired lease since its
   row died: the worker that held it may have decided to delete and stalled; it deletes
   whenever it wakes (outside any transaction, unfenced), and remove_owned's stamp names
   the same row, so it would delete the revived row's object or abort its staged upload. */
#ifndef BUG_REVIVE_AFTER_EXPIRY
#define NOT_STALE(k) !task_stale[k]
#else
#define NOT_STALE(k) 1  /* seeded bug: the first version's rule (the task's status only) */
#endif
#ifndef BUG_REVIVE_PROCESSING
#define RESUMABLE(k) (row_st[k] == R_FAILED && row_dig[k] == 0 && (task_st[k] == T_PENDING || task_st[k] == T_RETRY) && NOT_STALE(k))
#else
/* seeded bug: a task a sweep holds does not stop the revive */
#define RESUMABLE(k) (row_st[k] == R_FAILED && row_dig[k] == 0 && (task_st[k] == T_PENDING || task_st[k] == T_RETRY || task_st[k] == T_PROCESSING) && NOT_STALE(k))
#endif
inline find_resumable(out) {
  out = NONE; h_i = 0;
  do
  :: h_i < NR -> if :: RESUMABLE(h_i) -> out = h_i :: else -> skip fi; h_i++
  :: else -> break
  od;
  h_i = 0
}

/* the revive (resume): UPLOAD_FAILED -> UPLOADING, alive, held by the new sender, deadline
   WALL + DEADLINE; its task PENDING due at deadline + GRACE, lease cleared, retry count 0,
   no tag owed. The staged upload (the key) stays: an earlier sender's completion still in
   flight may land until its bound (put_old); the new sender's transfer is bounded from now.
   A verify pass owed stays owed (the row failed ambiguously or by deadline: that
   completion may still land), else a definite failure of the new sender, due at once,
   would delete before that completion lands and end the task. (A pass already scheduled
   means a delete was allowed: not resumable.) */
inline revive(k) {
#ifndef BUG_REVIVE_CLEARS_VERIFY
  row_st[k] = R_UPLOADING; row_del[k] = 0; row_dl[k] = WALL + DEADLINE;
#else
  /* seeded bug: verify_pass 0, as the first version did */
  row_st[k] = R_UPLOADING; row_del[k] = 0; row_amb[k] = 0; row_dl[k] = WALL + DEADLINE;
#endif
  row_hold[k] = hold;
  task_st[k] = T_PENDING; task_next[k] = WALL + DEADLINE + GRACE; task_lease[k] = 0;
  task_retry[k] = 0; task_vfy[k] = 0; CLEAR_OWE(k);
  if
  :: put_st[k] == P_INFLIGHT && now <= put_lim[k] && put_lim[k] + 1 > put_old[k] -> put_old[k] = put_lim[k] + 1
  :: else -> skip
  fi;
  put_lim[k] = now + DEADLINE
}
#endif

#ifdef TAGS
/* ObjectStore::mark_committed, outside any transaction: may fail while the store is
   unreachable; only an object that is there can be tagged. */
inline tag_object(k, ok) {
  if
  :: store_fails > 0 -> store_fails--; ok = 0
  :: true ->
     if
     :: obj[k] -> obj_com[k] = 1; ok = 1
     :: else -> ok = 0
     fi
  fi
}

/* SqliteLedger::settle: after the tag, the task (PENDING/RETRY, not held) of a row still
   alive and ACTIVE becomes IGNORED, the debt cleared. */
inline settle(r) {
  if
  :: row_st[r] == R_ACTIVE && !row_del[r] && (task_st[r] == T_PENDING || task_st[r] == T_RETRY) ->
     task_st[r] = T_IGNORED; task_owe[r] = 0; task_lease[r] = 0
  :: else -> skip
  fi
}
#endif

/* SqliteLedger::soft_delete (lodge delete): ACTIVE alive -> deleted, task due after grace */
inline soft_delete(r) {
  if
  :: row_st[r] == R_ACTIVE && !row_del[r] ->
     row_del[r] = 1; h_due = WALL + GRACE; ensure_pending_task(r, h_due); h_due = 0
  :: else -> skip
  fi
}

/* SqliteLedger::repair_row: an overdue alive UPLOADING row -> UPLOAD_FAILED + deleted,
   its task pending, due after the grace. */
inline repair_row(k) {
  if
  :: row_st[k] == R_UPLOADING && !row_del[k] && row_dl[k] < WALL ->
     row_st[k] = R_FAILED; row_del[k] = 1; row_amb[k] = 1;
     h_due = MAX(WALL, row_dl[k] + GRACE);
     ensure_pending_task(k, h_due);
     h_due = 0
  :: else -> skip
  fi
}

/* the lease check of decide() and finish(): the task is PROCESSING under our version */
#ifndef BUG_NO_FENCE
#define FENCED_OUT(k, mv) (task_st[k] != T_PROCESSING || task_ver[k] != mv)
#else
#define FENCED_OUT(k, mv) (task_st[k] != T_PROCESSING)
#endif

/* take the lease: SqliteLedger::claim_due / claim_task (lease_version + 1) */
inline take_lease(k, mv) {
#ifdef RESUME
  if
  :: task_st[k] == T_PROCESSING -> task_stale[k] = 1  /* its lease expired: a worker may lag */
  :: else -> skip
  fi;
#endif
  task_st[k] = T_PROCESSING; task_ver[k]++; task_lease[k] = WALL + LEASE; mv = task_ver[k]
}

/* SqliteLedger::decide, one transaction: lease still ours? row still UPLOADING ->
   POSTPONED (fix (a): an overdue one is marked failed here, like repair, task due after
   the grace); row alive -> IGNORED; row dead -> ALLOWED. (Promela's `if` picks any
   executable option: every guard here excludes the others.) */
inline decide(k, mv, dec) {
  if
  :: FENCED_OUT(k, mv) -> dec = D_LOST
  :: else ->
     assert(task_ver[k] == mv);  /* I5/I6: only the current lease holder decides */
#if SHARES
     /* I5 (shared): a dead row whose object another alive row uses (key_in_use: the row it
        shares, or one sharing it) is presented as alive and ACTIVE, as SqlLedger::decide
        does; the ledger itself is restored below */
#ifndef BUG_DECIDE_IGNORES_SHARERS
     h_sh = (DEAD(k) && USED_ELSEWHERE(k));
#endif
     if
     :: h_sh -> assert(row_st[k] == R_ACTIVE); row_del[k] = 0
     :: else -> skip
     fi;
#endif
     if
     :: row_st[k] == R_UPLOADING && !row_del[k] ->
#ifndef BUG_RECLAIM_SPIN
        if
        :: row_dl[k] < WALL -> row_st[k] = R_FAILED; row_del[k] = 1; row_amb[k] = 1
        :: else -> skip
        fi;
#endif
        task_st[k] = T_PENDING; task_next[k] = MAX(WALL, row_dl[k] + GRACE); task_lease[k] = 0;
        dec = D_POSTPONED
#ifndef TAGS
     :: ALIVE(k) && row_st[k] != R_UPLOADING -> task_st[k] = T_IGNORED; task_lease[k] = 0; dec = D_IGNORED
#else
     /* what the task records decides: the worker tags the object under its lease */
     :: ALIVE(k) && row_st[k] != R_UPLOADING && task_owe[k] -> dec = D_TAG
#ifdef BUG_HOST_DECIDES
     /* seeded bug: a sweeping host whose configuration does not tag ignores the debt */
     :: ALIVE(k) && row_st[k] != R_UPLOADING && task_owe[k] ->
        task_st[k] = T_IGNORED; task_lease[k] = 0; dec = D_IGNORED
#endif
     :: ALIVE(k) && row_st[k] != R_UPLOADING && !task_owe[k] ->
        task_st[k] = T_IGNORED; task_lease[k] = 0; dec = D_IGNORED
#endif
     :: else -> dec = D_ALLOWED
     fi
#if SHARES
     ;
     if
     :: h_sh -> row_del[k] = 1; h_sh = 0
     :: else -> skip
     fi;
     if
     :: dec == D_ALLOWED -> key_done[OKEY(k)] = 1  /* ghost: no alive row uses the key */
     :: else -> skip
     fi
#endif
  fi
}

/* SqliteLedger::finish, fenced: success -> SUCCESS (fix (b): after the first delete of an
   ambiguous/deadline failure, PENDING again for a verify pass one grace later);
   failure -> RETRY after a backoff, or FAILED past max_retries. */
inline finish(k, mv, ok) {
  if
  :: FENCED_OUT(k, mv) -> skip  /* lease_lost: changes nothing */
  :: else ->
     assert(task_ver[k] == mv);  /* I6: a stale lease changes nothing */
     if
     :: ok ->
#ifndef BUG_NO_VERIFY
        if
        :: row_amb[k] && !task_vfy[k] ->
           task_st[k] = T_PENDING; task_vfy[k] = 1; task_next[k] = WALL + VERIFY_DELAY; task_lease[k] = 0
        :: else -> task_st[k] = T_SUCCESS; task_lease[k] = 0
        fi
#else
        task_st[k] = T_SUCCESS; task_lease[k] = 0
#endif
     :: else ->
        if
        :: task_retry[k] + 1 > MAX_RETRIES -> task_st[k] = T_FAILED
        :: else -> task_st[k] = T_RETRY; task_next[k] = WALL + BACKOFF
        fi;
        task_retry[k]++; task_lease[k] = 0
     fi
  fi
}

#ifdef TAGS
/* SqliteLedger::end_tag, fenced: after a `tag` decision's tag, IGNORED if the row is still
   alive and ACTIVE; a row deleted meanwhile (its delete found the task held) makes it
   PENDING again for the delete, due after the grace. The debt is cleared either way. */
inline end_tag(k, mv) {
  if
  :: FENCED_OUT(k, mv) -> skip  /* lease_lost: changes nothing */
  :: else ->
     assert(task_ver[k] == mv);  /* I6 */
#ifndef BUG_TAG_END_IGNORES
     if
     :: ALIVE(k) -> task_st[k] = T_IGNORED
     :: else -> task_st[k] = T_PENDING; task_next[k] = WALL + GRACE
     fi;
#else
     /* seeded bug: ignore_task after the tag, whatever became of the row */
     task_st[k] = T_IGNORED;
#endif
     task_owe[k] = 0; task_lease[k] = 0
  fi
}
#endif

/* ObjectStore::remove_all, outside any transaction: idempotent (a missing object is
   success); may fail while the store is unreachable. I5/I8 are asserted here. */
inline remove_all(k, ok) {
  if
  :: store_fails > 0 -> store_fails--; ok = 0
  :: true ->
     assert(k != FOREIGN);           /* I8: another writer's object is never deleted */
     assert(DEAD(k));                /* I5: only the object of a dead row of this ledger */
#if SHARES
     assert(!IN_USE(OKEY(k)));       /* I5 (shared): no alive row uses the key */
     assert(OKEY(k) < FOREIGN);      /* I8 (shared): the key and stamp are of the row that wrote it */
#endif
     obj[OKEY(k)] = 0; ok = 1
  fi
}

/* ops::run_claimed_task: decide, delete outside the transaction, finish if still ours.
   Between the steps the worker may crash (its lease then expires) or lose its lease.
   A task decide postponed is left out of the rest of this sweep run (fix (a)). */
inline run_claimed_task(k, mv, dec, ok, excl) {
  atomic {
    decide(k, mv, dec); CHECK_INV;
#ifndef BUG_RECLAIM_SPIN
    if
    :: dec == D_POSTPONED -> excl = excl | (1 << k)
    :: else -> skip
    fi;
#endif
    if
    :: dec != D_ALLOWED && dec != D_TAG -> k = NONE; mv = 0; dec = 0
    :: else -> skip
    fi
  };
  if
  :: dec == D_ALLOWED ->
     atomic { remove_all(k, ok); CHECK_INV };  /* failpoint sweep.after_delete follows */
     atomic { finish(k, mv, ok); CHECK_INV; ok = 0; k = NONE; mv = 0; dec = 0 }
#ifdef TAGS
  :: dec == D_TAG ->
     atomic { tag_object(k, ok); CHECK_INV };
     atomic {
       if
       :: ok -> end_tag(k, mv)
       :: else -> finish(k, mv, 0)  /* RETRY after a backoff: the debt stays */
       fi;
       CHECK_INV; ok = 0; k = NONE; mv = 0; dec = 0
     }
#endif
  :: else -> skip
  fi
}

/* SqliteLedger::claim_due (batch 1): the due task first in (next_retry_at, id) order,
   leaving out the ones this run postponed (fix (a)). */
inline claim_due(k, mv, excl) {
  k = NONE; h_i = 0;
  do
  :: h_i < SLOTS ->
     if
     :: DUE(h_i) && !(excl & (1 << h_i)) && (k == NONE || task_next[h_i] < task_next[k]) -> k = h_i
     :: else -> skip
     fi;
     h_i++
  :: else -> break
  od;
  h_i = 0;
  if
  :: k != NONE -> take_lease(k, mv)
  :: else -> skip
  fi
}

/* ops::sweep: one run claims due tasks one at a time until none is left or --limit.
   "No spin": one run claims one task at most MAXCLAIMS times (cl0..cl3 count). */
inline sweep_run(k, mv, dec, ok, excl, claimed, cl0, cl1, cl2, cl3) {
  do
  :: atomic {
       claim_due(k, mv, excl);
       if
       :: k == NONE -> skip
       :: k == 0 -> cl0++; assert(cl0 <= MAXCLAIMS)  /* no spin */
       :: k == 1 -> cl1++; assert(cl1 <= MAXCLAIMS)  /* no spin */
       :: k == 2 -> cl2++; assert(cl2 <= MAXCLAIMS)  /* no spin */
       :: k == 3 -> cl3++; assert(cl3 <= MAXCLAIMS)  /* no spin */
#if SLOTS > 4
       :: k == 4 -> cl4++; assert(cl4 <= MAXCLAIMS)  /* no spin (SHARES = 2, or BATCH + SHARES) */
#endif
#if SLOTS > 5
       :: k == 5 -> cl5++; assert(cl5 <= MAXCLAIMS)  /* no spin (BATCH + SHARES = 2) */
#endif
       fi;
       claimed++
     };
     if
     :: k == NONE -> break
     :: else ->
        run_claimed_task(k, mv, dec, ok, excl);
        if
        :: claimed >= LIMIT -> break
        :: else -> skip
        fi
     fi
  od
}

/* A crash (kill -9) instead of the next step: one more option on every step of a
   worker, while the budget lasts. The worker's committed ledger state stays; a lease it
   held expires; a PUT it sent may still land. */
#define CRASH_OPT(lbl) :: atomic { crash_budget > 0 -> crash_budget--; goto lbl }

/* ---------------------------------------------------------------- processes */

/* ops::Uploader::upload_unguarded (+ transfer, fail, and a later lodge delete). Both
   uploaders send the same content for the same owner (de-dup and quota interact). A
   crash starts the next attempt (the script runs lodge upload again), if any is left.
   BATCH (Uploader::upload_batch): the reserve step also reserves the next attempt's file
   (`nxt`); once this file is done (up_done) that one goes on from its answer. */
proctype Uploader(byte first; byte attempts) {
  byte att = 0;
  byte r;
  byte mv;
  byte dec;
  bit ok;
#if RENEWS
  byte ren;       /* renewals made in this attempt */
#endif
#ifdef RESUME
  byte hold;      /* this attempt's holder name (1-based, unique) */
#endif
#ifdef BATCH
  byte nxt = NONE;  /* the row the batch reserved for the next attempt (NONE: none) */
#endif
up_start:
#ifdef BUG_BATCH_PUT_BEFORE_COMMIT
  /* seeded bug: the batch's second PUT leaves before the batch's transaction commits */
  atomic {
    if
    :: att + 1 < attempts ->
       put_st[first + att + 1] = P_INFLIGHT; put_lim[first + att + 1] = now + DEADLINE
    :: else -> skip
    fi
  };
#endif
  if
  :: atomic {
       /* SqliteLedger::reserve, then the PUT leaves (Uploader::transfer, If-None-Match:
          *). A PUT never sent and one lost on the way look the same to everyone else. */
       r = first + att; att++;
#ifdef RESUME
       hold = first + att;
#endif
       reserve_check(0, dec);
#ifndef BUG_SPLIT_RESERVE
       if
#ifndef RESUME
       :: dec == O_RESERVED -> reserve_insert(r, 0)
#else
       /* where reserve would insert: the newest resumable row is revived instead */
       :: dec == O_RESERVED ->
          find_resumable(h_j);
          if
          :: h_j != NONE -> r = h_j; revive(r)
          :: else -> reserve_insert(r, 0); row_hold[r] = hold
          fi;
          h_j = 0
#endif
       :: else -> skip
       fi;
       CHECK_INV;
#endif
#ifdef BATCH
       /* UploadLedger::reserve_batch: the next attempt's file (another content) is
          reserved in the same transaction, after the first and seeing it, exactly as a
          reserve of its own (its own savepoint); both commit together. Its row's deadline,
          its task's due time and its PUT's bound count from this reserve (the clocks are
          read once, for the batch). Its PUT leaves only after the first file's answer
          (Uploader::upload_batch sends one after another), but a PUT not yet sent and one
          on the way look the same to everyone else: it is in flight from here. */
       if
       :: att < attempts ->
          nxt = first + att; att++;
          reserve_check(BATCH_DIG, h_out);
          if
          :: h_out == O_RESERVED -> reserve_insert(nxt, BATCH_DIG); put_st[nxt] = P_INFLIGHT
          :: else -> nxt = NONE  /* duplicate, in progress or quota: no row, no PUT */
          fi;
          h_out = 0; CHECK_INV
       :: else -> skip
       fi;
#endif
       if
#ifndef BUG_SPLIT_RESERVE
       :: dec == O_RESERVED -> put_st[r] = P_INFLIGHT; dec = 0
#else
       :: dec == O_RESERVED -> dec = 0
#endif
       :: else -> goto up_done  /* duplicate, in progress or quota: no PUT (with BATCH
                                   the batch's next file goes on) */
       fi
     }
  CRASH_OPT(up_crash)
  fi;
#ifdef BUG_SPLIT_RESERVE
  /* seeded bug: the checks and the insert in two transactions */
  atomic { reserve_insert(r, 0); CHECK_INV; put_st[r] = P_INFLIGHT };
#endif
  /* The answer, and what the uploader commits on it (nothing shared changes between
     the two, so they are one step). Before it, renewals as parts finish. */
up_wait:
  if
#if RENEWS
  :: atomic {
       /* a part finished (before the bound), at least a quarter deadline after the last
          renewal: Renewal::progress */
       ren < RENEWS && (HOLDS(r) && put_st[r] == P_INFLIGHT && now <= put_lim[r]
#ifdef RESUME
                        || !HOLDS(r) && now < put_old[r]
#endif
                       ) ->
       ren++; renew(r, dec); CHECK_INV;
       if
       :: dec == 2 ->
          /* not_uploading / not_holder: no more parts, no completion; the ledger refuses
             anything else this sender would write (Uploader::fail: not UPLOADING, or
             not its holder) */
#ifndef BUG_RENEW_BOUND_FIRST
#ifdef RESUME
          if
          :: HOLDS(r) -> put_st[r] = P_REFUSED
          :: else -> put_old[r] = 0
          fi;
#else
          put_st[r] = P_REFUSED;
#endif
#endif
          dec = 0; goto up_done
       :: else -> dec = 0; goto up_wait
       fi
     }
#endif
#ifdef RESUME
  :: atomic {
       /* a part failed (or the stall, the deadline, a second Ctrl-C) with the staged upload
          intact: its completion is never sent; Uploader::fail -> fail_resumable */
       (HOLDS(r) && put_st[r] == P_INFLIGHT) || !HOLDS(r) ->
       if
       :: HOLDS(r) -> put_st[r] = P_REFUSED
       :: else -> skip
       fi;
       fail_resumable(r, ok); CHECK_INV; ok = 0; goto up_done
     }
#endif
  :: atomic {
       /* 200, only if the server stored it: ops::activate's confirm (owing the tag on a
          store that tags objects) */
       put_st[r] == P_LANDED ->
       confirm(r, 1, ok); CHECK_INV;
       if
       :: ok -> ok = 0
       :: else -> goto up_done  /* STATE_CHANGED: reported failed */
       fi
     };
#ifdef TAGS
     /* PendingActivation::finish: the tag (a store call), then the settle */
     if
     :: atomic { tag_object(r, ok); CHECK_INV }
     CRASH_OPT(up_crash)
     fi;
     if
     :: atomic {
          if
          :: ok -> settle(r)
          :: else -> skip  /* warned: lodge sweep tags it later */
          fi;
          ok = 0; CHECK_INV
        }
     CRASH_OPT(up_crash)
     fi;
#endif
#ifndef NO_SOFT_DELETE
     if
     :: atomic { soft_delete(r); CHECK_INV; goto up_done }  /* later: lodge delete */
     :: goto up_done
     fi
#else
     goto up_done
#endif
  :: atomic {
       /* a definite refusal (only if not stored, and then it never will be):
          Uploader::fail -> mark_failed(run_now), then claim_task for the immediate
          compensation through sweep's path */
#ifndef RESUME
       put_st[r] == P_INFLIGHT ->
       put_st[r] = P_REFUSED;
#else
       /* taken over (another sender revived the row): its own completion is refused */
       (HOLDS(r) && put_st[r] == P_INFLIGHT) || !HOLDS(r) ->
       if
       :: HOLDS(r) -> put_st[r] = P_REFUSED
       :: else -> put_old[r] = 0
       fi;
#endif
       mark_failed(r, 1, ok); CHECK_INV;
       if
       :: ok && DUE(r) -> take_lease(r, mv); ok = 0
       :: else -> ok = 0; goto up_done
       fi
     }
  :: atomic {
       /* no answer (ambiguous: it may still land): mark_failed, the task keeps its time */
       mark_failed(r, 0, ok); CHECK_INV; ok = 0; goto up_done
     }
  CRASH_OPT(up_crash)
  fi;
  /* ops::run_claimed_task for the uploader's own claim */
  if
  :: atomic {
       decide(r, mv, dec); CHECK_INV;
       if
       :: dec == D_ALLOWED -> dec = 0
       :: else -> goto up_done
       fi
     }
  CRASH_OPT(up_crash)
  fi;
  if
  :: atomic { remove_all(r, ok); CHECK_INV }
  CRASH_OPT(up_crash)
  fi;
  if
  :: atomic { finish(r, mv, ok); CHECK_INV; goto up_done }
  CRASH_OPT(up_crash)
  fi;
up_crash:
  atomic {
    mv = 0; dec = 0; ok = 0;
#if RENEWS
    ren = 0;
#endif
#ifdef BATCH
    nxt = NONE;  /* the batch's rows are abandoned; att already counts the pre-reserved one */
#endif
    if
    :: att < attempts -> goto up_start  /* lodge upload runs again: a new attempt */
    :: else -> skip
    fi
  };
up_done:
  atomic {
    mv = 0; dec = 0; ok = 0;
#if RENEWS
    ren = 0;
#endif
#ifdef BATCH
    /* Uploader::upload_batch: the batch's next file goes on with the row the batch
       reserved (no reserve of its own), its PUT sent now */
    if
    :: nxt != NONE ->
       r = nxt; nxt = NONE;
#ifdef BUG_BATCH_DEADLINE_FROM_PUT
       /* seeded bug: its bound counted from its PUT's start, not from the batch reserve */
       if
       :: put_st[r] == P_INFLIGHT -> put_lim[r] = now + DEADLINE
       :: else -> skip
       fi;
#endif
       goto up_wait
    :: else -> skip
    fi;
#endif
    r = 0; att = 0;
#ifdef RESUME
    hold = 0;
#endif
    finished++
  }
}

#if SHARES
/* ops::Uploader for a file of the same content at another path (SHARES). reserve answers
   `shareable` with an alive ACTIVE row that holds the content (the model lets it be any
   such row: the one that wrote the object or another sharing row); the uploader checks
   that row's object (a HEAD: there, by I1, while the row is alive) and reserves again
   with share_with: in one transaction that locks that row and requires it still alive and
   ACTIVE (else share_gone: ask again), the file gets a row of its own, ACTIVE at once,
   sharing the object of the row that wrote it, its task IGNORED. Later, maybe, `lodge
   delete` of this path. Until a row holds the content the uploader waits (the same run's
   in_progress), or, once nothing else can happen (timeout), ends: its own upload would be
   the writer's protocol, checked by the other configurations. A crash here loses nothing
   committed and a rerun asks again, the same step: not modelled separately. */
proctype Sharer(byte me) {
  byte s = NONE;  /* the row reserve answered with (share_with) */
sh_ask:
  atomic {
    if
    :: ACTIVE_AT(0) -> s = 0
    :: ACTIVE_AT(1) -> s = 1
#if NR == 3
    :: ACTIVE_AT(2) -> s = 2
#endif
    :: me != SH1 && ACTIVE_AT(SH1) -> s = SH1
#if SHARES > 1
    :: me != SH2 && ACTIVE_AT(SH2) -> s = SH2
#endif
    :: timeout -> goto sh_done
    fi
  };
  atomic {
    /* SqlLedger::reserve with share_with (dedup_answer, insert_reserved) */
#ifndef BUG_SHARE_NO_RECHECK
    if
    :: ACTIVE_AT(s) -> skip
    :: else -> s = NONE; goto sh_ask  /* share_gone: the uploader asks again */
    fi;
#endif
    /* once no alive row uses a key, none ever will: a share needs an alive user, locked */
    assert(!key_done[OKEY(s)]);
    row_st[me] = R_ACTIVE; row_del[me] = 0; row_dig[me] = row_dig[s];
    row_cof[me] = OKEY(s);  /* content_of: the row that wrote the object, never a sharer */
    task_st[me] = T_IGNORED; task_next[me] = WALL;
    s = NONE;
    CHECK_INV
  };
  if
  :: atomic { soft_delete(me); CHECK_INV }  /* later: lodge delete of this path */
  :: skip
  fi;
sh_done:
  atomic { s = NONE; finished++ }
}
#endif

/* ops::sweep run by cron: one run claims due tasks (batch 1) until none is due or
   --limit, each through ops::run_claimed_task; a crash ends the run and cron starts
   another. "No spin": a run claims one task at most MAXCLAIMS times (cl0..cl3). */
proctype Sweeper() {
  byte k = NONE;
  byte mv;
  byte dec;
  bit ok;
  byte excl;
  byte claimed;
  byte cl0, cl1, cl2, cl3;
#if SLOTS > 4
  byte cl4;
#endif
#if SLOTS > 5
  byte cl5;
#endif
sw_claim:
  if
  :: atomic {
       claim_due(k, mv, excl);
       if
       :: k == NONE -> goto sw_done
       :: k == 0 -> cl0++; assert(cl0 <= MAXCLAIMS)  /* no spin */
       :: k == 1 -> cl1++; assert(cl1 <= MAXCLAIMS)  /* no spin */
       :: k == 2 -> cl2++; assert(cl2 <= MAXCLAIMS)  /* no spin */
       :: k == 3 -> cl3++; assert(cl3 <= MAXCLAIMS)  /* no spin */
#if SLOTS > 4
       :: k == 4 -> cl4++; assert(cl4 <= MAXCLAIMS)  /* no spin (SHARES = 2, or BATCH + SHARES) */
#endif
#if SLOTS > 5
       :: k == 5 -> cl5++; assert(cl5 <= MAXCLAIMS)  /* no spin (BATCH + SHARES = 2) */
#endif
       fi;
       claimed++
     }
  CRASH_OPT(sw_crash)
  fi;
  /* failpoint sweep.after_claim */
  if
  :: atomic {
       decide(k, mv, dec); CHECK_INV;
#ifndef BUG_RECLAIM_SPIN
       if
       :: dec == D_POSTPONED -> excl = excl | (1 << k)  /* fix (a) */
       :: else -> skip
       fi;
#endif
       if
       :: dec == D_ALLOWED -> dec = 0
#ifdef TAGS
       :: dec == D_TAG -> dec = 0; goto sw_tag
#endif
       :: else ->
          k = NONE; mv = 0; dec = 0;
          if
          :: claimed < LIMIT -> goto sw_claim
          :: else -> goto sw_done
          fi
       fi
     }
  CRASH_OPT(sw_crash)
  fi;
  if
  :: atomic { remove_all(k, ok); CHECK_INV }
  CRASH_OPT(sw_crash)
  fi;
  /* failpoints sweep.after_delete, sweep.before_finish */
  if
  :: atomic {
       finish(k, mv, ok); CHECK_INV;
       k = NONE; mv = 0; ok = 0;
       if
       :: claimed < LIMIT -> goto sw_claim
       :: else -> goto sw_done
       fi
     }
  CRASH_OPT(sw_crash)
  fi;
#ifdef TAGS
  /* the `tag` decision: the tag under the lease, then end_tag (or RETRY if it failed) */
sw_tag:
  if
  :: atomic { tag_object(k, ok); CHECK_INV }
  CRASH_OPT(sw_crash)
  fi;
  if
  :: atomic {
       if
       :: ok -> end_tag(k, mv)
       :: else -> finish(k, mv, 0)
       fi;
       CHECK_INV;
       k = NONE; mv = 0; ok = 0;
       if
       :: claimed < LIMIT -> goto sw_claim
       :: else -> goto sw_done
       fi
     }
  CRASH_OPT(sw_crash)
  fi;
#endif
sw_crash:
  atomic {
    /* cron starts a new run */
    k = NONE; mv = 0; dec = 0; ok = 0; excl = 0; claimed = 0;
    cl0 = 0; cl1 = 0; cl2 = 0; cl3 = 0;
#if SLOTS > 4
    cl4 = 0;
#endif
#if SLOTS > 5
    cl5 = 0;
#endif
    goto sw_claim
  };
sw_done:
  atomic {
    k = NONE; mv = 0; dec = 0; ok = 0; excl = 0; claimed = 0;
    cl0 = 0; cl1 = 0; cl2 = 0; cl3 = 0;
#if SLOTS > 4
    cl4 = 0;
#endif
#if SLOTS > 5
    cl5 = 0;
#endif
    finished++
  }
}

/* ops::repair: overdue_uploads, then SqliteLedger::repair_row per row, each its own
   transaction; a crash ends the run and cron starts another. */
proctype Repair() {
  byte k = 0;
rp_next:
  if
  :: atomic {
       repair_row(k); CHECK_INV; k++;
       if
       :: k < NR -> goto rp_next
       :: else -> k = 0; finished++; goto rp_end
       fi
     }
  :: atomic { crash_budget > 0 -> crash_budget--; k = 0; goto rp_next }
  fi;
rp_end:
  skip
}

/* ops::reconcile --apply with the exact-key rule (I8, ARCHITECTURE.md): walk the listing; an
   object whose key is exactly the key of a dead row of this ledger with no live task
   is a leftover: SqliteLedger::requeue_task_for (it re-checks the row in its own
   transaction). Anything else (the foreign object) is reported and never touched.
   A crash ends the run and cron starts another. */
proctype Reconcile() {
  byte k = 0;
#ifdef TAGS
  bit ok;
#endif
rc_read:
  if
  :: atomic {
       /* the merge-join reads: the object listed, the row by key, its task */
       if
       :: obj[k] && DEAD(k) && !LIVE_TASK(k) -> skip
#ifdef TAGS
       /* --roll-forward: an UPLOADING row whose object is there (confirmed_after_backup) */
       :: obj[k] && row_st[k] == R_UPLOADING && !row_del[k] -> skip
#endif
#ifdef BUG_ADOPT_ORPHAN
       :: obj[k] && row_st[k] == R_NONE -> skip
#endif
       :: else ->
          k++;
          if
          :: k < SLOTS -> goto rc_read
          :: else -> k = 0; finished++; goto rc_end
          fi
       fi
     }
  :: atomic { crash_budget > 0 -> crash_budget--; k = 0; goto rc_read }
  fi;
  if
  :: atomic {
#ifdef BUG_ADOPT_ORPHAN
       /* seeded bug: an object with no row is adopted (row + task made) */
       if
       :: row_st[k] == R_NONE -> row_st[k] = R_FAILED; row_del[k] = 1
       :: else -> skip
       fi;
#endif
       if
       :: DEAD(k) -> h_due = WALL; ensure_pending_task(k, h_due); h_due = 0
#ifdef TAGS
#ifndef BUG_ROLL_FORWARD_UNOWED
       /* reconcile --apply --roll-forward: ops::activate, as the upload's own */
       :: row_st[k] == R_UPLOADING && !row_del[k] && obj[k] -> confirm(k, 1, ok)
#else
       /* seeded bug: a plain confirm (CommitTag::none), and no tag */
       :: row_st[k] == R_UPLOADING && !row_del[k] && obj[k] -> confirm(k, 0, ok); ok = 0
#endif
#endif
       :: else -> skip
       fi;
       CHECK_INV;
#ifdef TAGS
       if
       :: ok -> goto rc_tag
       :: else -> skip
       fi;
#endif
       k++;
       if
       :: k < SLOTS -> goto rc_read
       :: else -> k = 0; finished++; goto rc_end
       fi
     }
  :: atomic { crash_budget > 0 -> crash_budget--; k = 0; goto rc_read }
  fi;
#ifdef TAGS
  /* the activation's tag, then its settle */
rc_tag:
  if
  :: atomic { tag_object(k, ok); CHECK_INV }
  :: atomic { crash_budget > 0 -> crash_budget--; k = 0; ok = 0; goto rc_read }
  fi;
  if
  :: atomic {
       if
       :: ok -> settle(k)
       :: else -> skip
       fi;
       ok = 0; CHECK_INV;
       k++;
       if
       :: k < SLOTS -> goto rc_read
       :: else -> k = 0; finished++; goto rc_end
       fi
     }
  :: atomic { crash_budget > 0 -> crash_budget--; k = 0; ok = 0; goto rc_read }
  fi;
#endif
rc_end:
  skip
}

/* I2: no object of ours without its row and its task committed first */
inline land(k) {
  assert(row_st[k] != R_NONE && task_st[k] != T_NONE);  /* I2 */
  put_st[k] = P_LANDED; obj[k] = 1
#ifdef RESUME
  ; put_old[k] = 0  /* the staged upload is completed: no completion of it lands again */
#endif
#ifdef TAGS
  ; obj_com[k] = 0  /* every put tags its object pending */
#endif
}

/* The object store's side of a PUT: one that was sent may be stored at any moment
   until its bound (moved by each renewal that committed), or never (lost). With RESUME
   also an earlier sender's completion, until its own bound. */
#ifdef RESUME
#define PUT_OPEN(k) ((put_st[k] == P_INFLIGHT && now <= put_lim[k]) || now < put_old[k])
#else
#define PUT_OPEN(k) (put_st[k] == P_INFLIGHT && now <= put_lim[k])
#endif
active proctype Server() {
end:
  do
  :: atomic { PUT_OPEN(0) -> land(0) }
  :: atomic { PUT_OPEN(1) -> land(1) }
#if NR == 3
  :: atomic { PUT_OPEN(2) -> land(2) }
#endif
  od
}

/* true time passes; the wall clock may step forward, up to SKEW ahead in all. Once
   every worker has ended, Final moves time on. */
active proctype Clock() {
end:
  do
  :: atomic { now < TMAX && finished < NWORKERS -> now++ }
  :: atomic { skew < SKEW && finished < NWORKERS -> skew++ }
  od
}

/* I7, at the quiescent end: every worker has ended; the store is reachable; time is
   past every deadline, grace and lease. One run of repair, then of sweep: no UPLOADING
   row is overdue, no task is due, no object of ours is left without an alive ACTIVE row
   (reconcile would find no leftover or dangling item), the foreign object is still there.
   One grace later a second sweep (the verify passes) leaves every task finished. */
active proctype Final() {
  byte k = NONE;
  byte mv;
  byte dec;
  bit ok;
  byte excl;
  byte claimed;
  byte cl0, cl1, cl2, cl3;
#if SLOTS > 4
  byte cl4;
#endif
#if SLOTS > 5
  byte cl5;
#endif
  byte i;
  byte phase = 0;
  finished == NWORKERS;
  atomic {
    crash_budget = 0; store_fails = 0;
    skew = SKEW; now = TMAX + DEADLINE + GRACE + LEASE + 2;
    i = 0;
    do
    :: i < NR -> repair_row(i); i++
    :: else -> break
    od;
    do
    :: phase < 2 ->
       k = NONE; mv = 0; dec = 0; ok = 0; excl = 0; claimed = 0;
       cl0 = 0; cl1 = 0; cl2 = 0; cl3 = 0;
#if SLOTS > 4
       cl4 = 0;
#endif
#if SLOTS > 5
       cl5 = 0;
#endif
       sweep_run(k, mv, dec, ok, excl, claimed, cl0, cl1, cl2, cl3);
       i = 0;
       do
       :: i < SLOTS ->
          /* I7: no UPLOADING row overdue, no task due, no leftover object of ours */
          assert(!(row_st[i] == R_UPLOADING && !row_del[i] && row_dl[i] < WALL));  /* I7 overdue */
          assert(!DUE(i));                                                        /* I7 due */
          /* a dead letter (FAILED, past max_retries) is the one leftover I7 allows:
             status counts it and reconcile --apply requeues it */
          assert(i == FOREIGN || !obj[i] || KEPT(i)); /* I7 leftover */
          /* after the verify passes, every task is finished */
          assert(phase == 0 || task_st[i] == T_NONE || task_st[i] == T_SUCCESS || task_st[i] == T_IGNORED || task_st[i] == T_FAILED); /* I7 */
#ifdef TAGS
          /* no alive ACTIVE row's object is left pending for the backstop to expire (but
             one whose tag task is a dead letter, which status reports) */
          assert(!(row_st[i] == R_ACTIVE && !row_del[i] && obj[i] && !obj_com[i]) || task_st[i] == T_FAILED); /* I7 tag */
#endif
          i++
       :: else -> break
       od;
       assert(obj[FOREIGN]);  /* I8: the foreign object is untouched */
       now = now + VERIFY_DELAY + 1;
       phase++
    :: else -> break
    od
  }
}

init {
  atomic {
    obj[FOREIGN] = 1;  /* another writer's object under the same prefix */
    run Uploader(0, A0);
#ifndef ONE_UPLOADER
    run Uploader(A0, A1);
#else
    finished++;
#endif
#if SHARES
    run Sharer(SH1);
#endif
#if SHARES > 1
    run Sharer(SH2);
#endif
#ifndef NO_SWEEPER
    run Sweeper();
#else
    finished++;
#endif
#ifndef ONE_SWEEPER
    run Sweeper();
#else
    finished++;
#endif
#ifndef NO_REPAIR
    run Repair();
#else
    finished++;
#endif
#ifndef NO_RECONCILE
    run Reconcile()
#else
    finished++
#endif
  }
}
