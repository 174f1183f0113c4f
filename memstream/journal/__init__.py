"""The durable thread journal: message model (`models`), interface (`base`), token counts
(`tokens`) and the SlateDB implementation (`store`, `keys`, `objectstore`, `fencing`).

Import from the module that defines a name: this package re-exports nothing, so that the
interface and models can live apart from the SlateDB adapter without an import cycle.
"""
