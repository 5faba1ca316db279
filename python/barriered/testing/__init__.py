"""The tests' fault-injection handler (:mod:`.faults`), barrier conformance runner and
test doubles: in a source checkout only; the wheel leaves this package out."""
