"""Reports: JSON, JUnit, HTML, replay folders, safe report folders."""
