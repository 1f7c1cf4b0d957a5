"""Helpers for holiday-rental bookings."""
