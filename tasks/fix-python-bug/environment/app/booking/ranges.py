"""Date-range helpers for bookings.

A booking (a "stay") is the half-open range [checkin, checkout): the guest occupies the
property for every night starting on `checkin` up to, but not including, `checkout`.
"""
from datetime import date, timedelta


def parse_booking(text):
    """Parse "YYYY-MM-DD..YYYY-MM-DD" into a (checkin, checkout) tuple of dates.

    Surrounding whitespace is ignored. Raises ValueError if the text is malformed or the
    stay has no night (checkout must be strictly after checkin).
    """
    parts = text.strip().split("..")
    if len(parts) != 2:
        raise ValueError("expected 'CHECKIN..CHECKOUT', got %r" % text)
    checkin = date.fromisoformat(parts[0].strip())
    checkout = date.fromisoformat(parts[1].strip())
    if checkout < checkin:
        raise ValueError("checkout %s is before checkin %s" % (checkout, checkin))
    return checkin, checkout


def nights(checkin, checkout):
    """Number of nights of the stay [checkin, checkout)."""
    return (checkout - checkin).days


def occupied_nights(checkin, checkout):
    """List of the dates of every night of the stay [checkin, checkout), in order."""
    return [checkin + timedelta(days=i) for i in range(nights(checkin, checkout) + 1)]


def merge_bookings(bookings):
    """Merge stays into maximal continuous occupied blocks.

    `bookings` is an iterable of (checkin, checkout) tuples in any order. Overlapping stays
    and stays that touch (one checks out the day the next checks in) form one block.
    Returns a list of (start, end) half-open tuples sorted by start.
    """
    blocks = []
    for checkin, checkout in bookings:
        if blocks and checkin < blocks[-1][1]:
            start, end = blocks[-1]
            blocks[-1] = (start, max(end, checkout))
        else:
            blocks.append((checkin, checkout))
    return blocks
