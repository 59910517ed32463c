"""Weight publication to the engines and the startup weight audit."""
