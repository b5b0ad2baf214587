"""flashcl inside other frameworks (each module imports its framework only when imported)."""
