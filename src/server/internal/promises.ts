/**
 * Promises shared by many waiters (the sends of one commit, of one burst to the replicas), any of
 * which may be gone when it settles: a closed connection, a move refused after its first entry.
 * Bun ends the process on a rejection nobody handles, so such a promise is marked handled where
 * it is made; whoever still awaits it gets the rejection as before.
 */
export function mayOutliveItsWaiters<T>(promise: Promise<T>): Promise<T> {
  promise.catch(ignore);
  return promise;
}

function ignore(): void {}
