import unittest
from datetime import date as d

from booking.ranges import merge_bookings, nights, occupied_nights, parse_booking


class ParseTests(unittest.TestCase):
    def test_parse_basic(self):
        self.assertEqual(parse_booking("2024-03-01..2024-03-04"), (d(2024, 3, 1), d(2024, 3, 4)))

    def test_parse_whitespace(self):
        self.assertEqual(parse_booking("  2024-03-01 .. 2024-03-02\n"), (d(2024, 3, 1), d(2024, 3, 2)))

    def test_parse_one_night_ok(self):
        self.assertEqual(parse_booking("2023-12-31..2024-01-01"), (d(2023, 12, 31), d(2024, 1, 1)))

    def test_parse_rejects_zero_nights(self):
        with self.assertRaises(ValueError):
            parse_booking("2024-03-01..2024-03-01")

    def test_parse_rejects_backwards(self):
        with self.assertRaises(ValueError):
            parse_booking("2024-03-04..2024-03-01")

    def test_parse_rejects_malformed(self):
        for bad in ["2024-03-01", "2024-03-01..2024-03-02..2024-03-03", "2024-13-01..2024-13-05", ""]:
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                parse_booking(bad)


class NightTests(unittest.TestCase):
    def test_nights(self):
        self.assertEqual(nights(d(2024, 3, 1), d(2024, 3, 4)), 3)

    def test_occupied_basic(self):
        self.assertEqual(occupied_nights(d(2024, 3, 1), d(2024, 3, 4)),
                         [d(2024, 3, 1), d(2024, 3, 2), d(2024, 3, 3)])

    def test_occupied_single_night(self):
        self.assertEqual(occupied_nights(d(2024, 3, 1), d(2024, 3, 2)), [d(2024, 3, 1)])

    def test_occupied_leap_day(self):
        self.assertEqual(occupied_nights(d(2024, 2, 28), d(2024, 3, 1)), [d(2024, 2, 28), d(2024, 2, 29)])

    def test_occupied_year_end(self):
        self.assertEqual(occupied_nights(d(2023, 12, 30), d(2024, 1, 2)),
                         [d(2023, 12, 30), d(2023, 12, 31), d(2024, 1, 1)])

    def test_length_matches_nights(self):
        for a, b in [(d(2024, 1, 1), d(2024, 1, 31)), (d(2023, 2, 1), d(2023, 3, 1)), (d(2024, 6, 5), d(2024, 6, 6))]:
            with self.subTest(a=a, b=b):
                got = occupied_nights(a, b)
                self.assertEqual(len(got), nights(a, b))
                self.assertNotIn(b, got)


class MergeTests(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(merge_bookings([]), [])

    def test_overlap(self):
        self.assertEqual(merge_bookings([(d(2024, 3, 1), d(2024, 3, 5)), (d(2024, 3, 3), d(2024, 3, 8))]),
                         [(d(2024, 3, 1), d(2024, 3, 8))])

    def test_touching_merge(self):
        self.assertEqual(merge_bookings([(d(2024, 3, 1), d(2024, 3, 4)), (d(2024, 3, 4), d(2024, 3, 6))]),
                         [(d(2024, 3, 1), d(2024, 3, 6))])

    def test_gap_of_one_night_stays_separate(self):
        a, b = (d(2024, 3, 1), d(2024, 3, 4)), (d(2024, 3, 5), d(2024, 3, 6))
        self.assertEqual(merge_bookings([a, b]), [a, b])

    def test_contained(self):
        self.assertEqual(merge_bookings([(d(2024, 3, 1), d(2024, 3, 10)), (d(2024, 3, 2), d(2024, 3, 4))]),
                         [(d(2024, 3, 1), d(2024, 3, 10))])

    def test_unsorted_input(self):
        bookings = [
            (d(2024, 3, 10), d(2024, 3, 12)),
            (d(2024, 3, 1), d(2024, 3, 3)),
            (d(2024, 3, 12), d(2024, 3, 15)),
            (d(2024, 3, 3), d(2024, 3, 4)),
            (d(2024, 3, 20), d(2024, 3, 21)),
        ]
        self.assertEqual(merge_bookings(bookings), [
            (d(2024, 3, 1), d(2024, 3, 4)),
            (d(2024, 3, 10), d(2024, 3, 15)),
            (d(2024, 3, 20), d(2024, 3, 21)),
        ])

    def test_generator_input(self):
        gen = ((d(2024, 1, i), d(2024, 1, i + 1)) for i in (5, 3, 4, 1))
        self.assertEqual(merge_bookings(gen), [(d(2024, 1, 1), d(2024, 1, 2)), (d(2024, 1, 3), d(2024, 1, 6))])

    def test_input_not_mutated(self):
        bookings = [(d(2024, 3, 5), d(2024, 3, 6)), (d(2024, 3, 1), d(2024, 3, 5))]
        copy = list(bookings)
        merge_bookings(bookings)
        self.assertEqual(bookings, copy)


if __name__ == "__main__":
    unittest.main()
