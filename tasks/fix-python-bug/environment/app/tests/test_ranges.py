import unittest
from datetime import date

from booking.ranges import nights, parse_booking, merge_bookings


class VisibleTests(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_booking("2024-03-01..2024-03-04"),
                         (date(2024, 3, 1), date(2024, 3, 4)))

    def test_parse_rejects_backwards(self):
        with self.assertRaises(ValueError):
            parse_booking("2024-03-04..2024-03-01")

    def test_nights(self):
        self.assertEqual(nights(date(2024, 3, 1), date(2024, 3, 4)), 3)

    def test_merge_overlapping(self):
        a = (date(2024, 3, 1), date(2024, 3, 5))
        b = (date(2024, 3, 3), date(2024, 3, 8))
        self.assertEqual(merge_bookings([a, b]), [(date(2024, 3, 1), date(2024, 3, 8))])


if __name__ == "__main__":
    unittest.main()
