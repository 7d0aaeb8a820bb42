"""Domain types shared by every layer. Imports nothing from the rest of hetpool."""
