package dev.rebound.client;

/**
 * One item's result in a batch: {@code enqueued}, or {@code error} (the status it would have had on
 * its own).
 *
 * @param enqueued the answer, or null
 * @param error the item's error, or null
 */
public record BatchResult(Enqueued enqueued, ReboundException error) {
  public boolean ok() {
    return error == null;
  }
}
