"""The chaos tier: real faults (kill -9, terminated connections, store restarts, a black-hole
proxy, SIGSTOP, libfaketime clocks) against real instances, with figures of lost and
doubled work."""
