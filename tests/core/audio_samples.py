"""Audio clips of a given duration built in memory, for the header-only duration reader
(extproc.core.request.audio): no encoder is needed, only each format's header fields (silence or zero
payloads; ``mutagen`` reads the headers, never the audio)."""

from __future__ import annotations

import io
import struct
import wave

from mutagen.ogg import OggPage


def wav(seconds: float, rate_hz: int = 8000) -> bytes:
    """PCM 16-bit mono silence."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes(b"\0\0" * round(seconds * rate_hz))
    return out.getvalue()


def flac(seconds: float, rate_hz: int = 16000) -> bytes:
    """``fLaC`` and a STREAMINFO block (the total sample count sets the duration), no frames."""
    total = round(seconds * rate_hz)
    bits = (rate_hz << 44) | (0 << 41) | (15 << 36) | total  # rate 20 bits, channels-1 3, bps-1 5, samples 36
    info = struct.pack(">HH", 4096, 4096) + b"\0\0\0\0\0\0" + bits.to_bytes(8, "big") + b"\0" * 16
    return b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info


def ogg_opus(seconds: float, pre_skip: int = 312) -> bytes:
    """OpusHead, OpusTags and one audio page whose granule position ends the stream at ``seconds``."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, pre_skip, 16000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 0)
    pages = []
    for seq, (packet, granule) in enumerate(
        [(head, 0), (tags, 0), (b"\xf8\xff\xfe", pre_skip + round(seconds * 48000))]
    ):
        page = OggPage()  # type: ignore[no-untyped-call]
        page.serial, page.sequence, page.position = 0x1234, seq, granule
        page.first, page.last = seq == 0, seq == 2
        page.packets = [packet]
        pages.append(page.write())  # type: ignore[no-untyped-call]
    return b"".join(pages)


def mp3(seconds: float) -> bytes:
    """MPEG-1 Layer III frames at 128 kb/s, 44.1 kHz (417 bytes, 1152 samples each), zero payload."""
    frames = round(seconds * 44100 / 1152)
    frame = b"\xff\xfb\x90\x64" + b"\0" * (417 - 4)
    return frame * frames
