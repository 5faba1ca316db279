"""Local servers to try barriered with (``barriered kafka-broker``): child processes on
free 127.0.0.1 ports, waited for until they answer, stopped by pid. Nothing here is
downloaded: the Kafka broker runs from the jars ``make kafka`` fetched."""
