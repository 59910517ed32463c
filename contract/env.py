"""Environment variables of the manifest's trust chain (imports nothing: the compiler's
fast paths read them too).

``RLC_MANIFEST_SHA256``: set by the Beaker spec, the digest the job was submitted with
(`compiler.manifest.trust` refuses another manifest). ``RLC_MANIFEST_VERIFIED``: set by a
process that verified the manifest, for the processes it starts (`contract.run`). A spec's
``launch.env`` may set neither (`contract.spec.constants.RESERVED_ENV`).
"""

PIN_ENV = "RLC_MANIFEST_SHA256"
VERIFIED_ENV = "RLC_MANIFEST_VERIFIED"
