package dev.rebound.client;

import dev.rebound.client.tools.Saga;
import org.junit.jupiter.api.Test;

/** The runnable examples (dev.rebound.client.tools), against a live node. */
class ExamplesTest {
  @Test
  void sagaCompensatesInOrder() throws Exception {
    try (TestCluster cluster = new TestCluster()) {
      // Throws unless each compensation ran once, in order, within 60 s.
      Saga.run(cluster.start());
    }
  }
}
