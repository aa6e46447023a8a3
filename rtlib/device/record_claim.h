/* The exception record's claim, shared by both targets' rtlib (device/rtlib.c, device/amdgcn.c):
 * included after each defines u64, record(), my_linear_id() and tid_x() ... bid_z() for its GPU. */

/* Whether this thread owns the info record, claiming it if nobody has. */
static int owns_record(void) {
  u64 me = my_linear_id();
  u64 expected = 0;
  if (__atomic_compare_exchange_n(&record()->owner, &expected, me, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    record()->thread[0] = tid_x();
    record()->thread[1] = tid_y();
    record()->thread[2] = tid_z();
    record()->block[0] = bid_x();
    record()->block[1] = bid_y();
    record()->block[2] = bid_z();
    return 1;
  }
  return expected == me;
}

static void copy_text(char *to, const char *from, int capacity) {
  int i = 0;
  if (from != 0) {
    for (; i < capacity - 1 && from[i] != 0; ++i) to[i] = from[i];
  }
  to[i] = 0;
}
