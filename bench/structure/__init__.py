"""What a request runs through the code (modules, crossings of the layers, reads of the Delta log)."""
